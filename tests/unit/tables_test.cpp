// The tables declared once (docs/architecture.md "Declared once"): the run flags against
// docs/usage.md, --help and the checks; the backends; the phases against the result schema.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/cli.hpp"
#include "zob/backends.hpp"
#include "zob/errors.hpp"
#include "zob/phase.hpp"
#include "zob/run_flags.hpp"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The cells of a markdown table row, split at '|' that are not escaped ("\|").
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  for (std::size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (row[i] == '|') {
      const auto b = cell.find_first_not_of(' ');
      const auto e = cell.find_last_not_of(' ');
      out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return out;
}

// docs/usage.md's run flag table: flag name -> default column.
std::map<std::string, std::string> usage_table() {
  std::map<std::string, std::string> rows;
  std::istringstream in(read_file(std::string(ZOB_SOURCE_DIR) + "/docs/usage.md"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `--", 0) != 0) continue;
    const auto c = cells(line);
    const std::string name = c.at(0).substr(1, c.at(0).find_first_of(" `", 1) - 1);
    EXPECT_TRUE(rows.emplace(name, c.at(1)).second) << name << " listed twice";
  }
  return rows;
}

zob::CliCommand parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "zero3-offload-bench");
  return zob::parse_command_line(flags);
}

TEST(RunFlags, UsageTableMatchesTheCode) {
  const auto doc = usage_table();
  std::set<std::string> code;
  for (const zob::RunFlag& f : zob::run_flags()) {
    code.insert(f.name);
    const auto it = doc.find(f.name);
    if (it == doc.end()) {
      ADD_FAILURE() << f.name << " is missing from docs/usage.md";
      continue;
    }
    EXPECT_EQ(it->second, f.doc_default) << f.name;
  }
  for (const auto& [name, def] : doc) {
    EXPECT_TRUE(code.count(name)) << name << " is in docs/usage.md but not a flag";
  }
}

TEST(RunFlags, NumericDefaultsAreTheConfigsDefaults) {
  const zob::RunConfig defaults;
  for (const zob::RunFlag& f : zob::run_flags()) {
    if (f.get == nullptr || f.doc_default.empty() || !std::isdigit(f.doc_default[0])) continue;
    EXPECT_EQ(f.doc_default.substr(0, f.doc_default.find(' ')), std::to_string(f.get(defaults)))
        << f.name;
  }
}

TEST(RunFlags, HelpShowsEveryFlagWithItsText) {
  testing::internal::CaptureStdout();
  parse({"--help"});
  const std::string help = testing::internal::GetCapturedStdout();
  for (const zob::RunFlag& f : zob::run_flags()) {
    EXPECT_NE(help.find(f.name), std::string::npos) << f.name;
    EXPECT_NE(help.find(f.help), std::string::npos) << f.name;
  }
}

// Each integer flag takes its end points and refuses one past them, on the command line and
// in validate_run_config (the child's re-check).
TEST(RunFlags, RangesAreEnforcedByTheCliAndTheCheck) {
  for (const zob::RunFlag& f : zob::run_flags()) {
    if (f.kind != zob::FlagKind::integer) continue;
    SCOPED_TRACE(f.name);
    for (const std::int64_t v : {f.min, f.max}) {
      const auto cmd = parse({f.name, std::to_string(v)});
      EXPECT_EQ(f.get(cmd.run), v);
    }
    for (const std::int64_t v : {f.min - 1, f.max + 1}) {
      try {
        parse({f.name, std::to_string(v)});
        ADD_FAILURE() << v << " accepted";
      } catch (const zob::UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(f.name), std::string::npos) << e.what();
      }
    }
    zob::RunConfig c;
    c.threads = 1;
    f.set(c, f.max + 1);
    EXPECT_THROW(zob::validate_run_config(c), zob::UsageError);
    f.set(c, f.config_min - 1);
    EXPECT_THROW(zob::validate_run_config(c), zob::UsageError);
  }
}

TEST(Backends, NamesRoundTripAndAutoTriesAcceleratorsFirst) {
  EXPECT_EQ(zob::backend_names("or"), "cpu, cuda or xpu");
  EXPECT_EQ(zob::backend_names("|", true), "auto|cpu|cuda|xpu");
  for (const zob::BackendInfo& b : zob::kBackends) {
    EXPECT_EQ(zob::find_backend(b.name), &b);
    EXPECT_EQ(zob::find_backend(b.kind), &b);
    EXPECT_STREQ(zob::to_string(zob::parse_device_kind(b.name)), b.name);
    EXPECT_EQ(b.plugin == nullptr, !b.accelerator) << b.name;
  }
  EXPECT_EQ(zob::find_backend("gpu"), nullptr);
  EXPECT_EQ(zob::find_backend(zob::DeviceKind::automatic), nullptr);
}

TEST(Phase, SchemaListsExactlyThePhases) {
  const auto schema =
      nlohmann::json::parse(read_file(std::string(ZOB_SOURCE_DIR) + "/docs/result-schema.json"));
  std::vector<std::string> listed;
  // Every "phases" object of the schema names its keys with the same enum.
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "phases" && v.contains("propertyNames")) {
          listed = v.at("propertyNames").at("enum").get<std::vector<std::string>>();
        }
        walk(v);
      }
    } else if (j.is_array()) {
      for (const auto& v : j) walk(v);
    }
  };
  walk(schema);
  std::vector<std::string> names;
  for (zob::Phase p : zob::kAllPhases) {
    names.emplace_back(zob::to_string(p));
    EXPECT_EQ(zob::parse_phase(zob::to_string(p)), p);
  }
  EXPECT_EQ(listed, names);
  EXPECT_FALSE(zob::parse_phase("warp_drive").has_value());
}

}  // namespace
