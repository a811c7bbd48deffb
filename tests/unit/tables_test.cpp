// The tables declared once (docs/architecture.md "Declared once"): the settings against
// docs/usage.md, --help, the JSON hand-over, the workload and the checks; the backends; the
// phases against the result schema.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/cli.hpp"
#include "report/report.hpp"
#include "step/schedule_case.hpp"
#include "zob/backends.hpp"
#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/phase.hpp"
#include "zob/settings.hpp"

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

TEST(RunSettings, UsageTableMatchesTheDeclarations) {
  const auto doc = usage_table();
  std::set<std::string> code;
  for (const zob::Setting& s : zob::settings()) {
    if (!s.has_flag()) continue;
    code.insert(s.flag);
    const auto it = doc.find(s.flag);
    if (it == doc.end()) {
      ADD_FAILURE() << s.flag << " is missing from docs/usage.md";
      continue;
    }
    EXPECT_EQ(it->second, s.doc_default()) << s.flag;
  }
  for (const auto& [name, def] : doc) {
    EXPECT_TRUE(code.count(name)) << name << " is in docs/usage.md but not a flag";
  }
}

// Each flag's line of --help: "--hidden N=2048   hidden size h" (a [default] only where the
// declaration has one), in the declarations' order.
TEST(RunSettings, HelpShowsEveryFlagWithItsValueDefaultAndText) {
  testing::internal::CaptureStdout();
  parse({"--help"});
  const std::string help = testing::internal::GetCapturedStdout();
  std::size_t last = 0;
  for (const zob::Setting& s : zob::settings()) {
    if (!s.has_flag()) continue;
    std::string head = "  " + s.flag;
    if (!s.value_name.empty()) head += " " + s.value_name;
    if (!s.help_default().empty()) head += "=" + s.help_default();
    const auto at = help.find(head + (s.help_default().empty() ? " " : ""));
    ASSERT_NE(at, std::string::npos) << head;
    EXPECT_GT(at, last) << s.flag << " out of order";
    last = at;
    const auto text = help.find(s.help, at);
    EXPECT_NE(text, std::string::npos) << s.flag;
    EXPECT_EQ(help.find("\n  --", at + 1), help.find("\n  --", text)) << s.flag << "'s help";
  }
}

// A RunConfig whose every setting differs from its default (the test below fails for a new
// setting until it is changed here too).
zob::RunConfig changed_config() {
  zob::RunConfig c;
  c.model = zob::resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-qwen2");
  c.model.vocab = 1000;
  c.model.hidden = 64;
  c.model.layers = 3;
  c.batch = 3, c.seq = 17, c.steps = 5, c.warmup = 1;
  c.device = zob::DeviceKind::xpu, c.device_index = 2;
  c.arms = {zob::Arm::hostalloc, zob::Arm::pageable};
  c.loop = zob::Loop::offload_param;
  c.chunk_elems = 12345, c.sub_group_size = 777, c.threads = 3, c.seed = 99;
  c.chunk_elems_sweep = {12345, 5}, c.sub_group_size_sweep = {777, 9};
  c.json_path = "out.json", c.timeout_s = 12.5, c.gpus = 2, c.repeats = 3;
  c.schedule = zob::Schedule::overlap, c.cpu_affinity = {3, 1};
  c.trace_path = "t.json", c.plot_path = "p.svg", c.csv_path = "c.csv";
  c.skip_preflight = true, c.compat = zob::Compat::v2, c.dry_run = true;
  c.ablate_register = true, c.decoder = zob::DecoderKernels::eager;
  c.deepspeed_step_s = 3.25, c.deepspeed_arm = zob::Arm::registered;
  c.device_memory_bytes = 24'000'000'000;
  c.offload_ratio = 0.5, c.offload_ratio_sweep = {0.5, 0.25};
  c.fit = true, c.fit_budget_s = 90;
  return c;
}

// The child's hand-over: exactly the declared keys; each read back alone into a default
// config; an absent key reads as the member's default.
TEST(RunSettings, JsonHasExactlyTheDeclaredKeysEachReadAndWritten) {
  const zob::RunConfig defaults, changed = changed_config();
  const nlohmann::json j = changed;
  std::set<std::string> keys;
  for (const zob::Setting& s : zob::settings()) {
    if (s.json_key.empty()) continue;
    keys.insert(s.json_key);
    EXPECT_NE(s.write(changed), s.write(defaults)) << s.json_key << ": not changed by the test";
    EXPECT_EQ(j.at(s.json_key), s.write(changed)) << s.json_key;
    const auto one = nlohmann::json{{s.json_key, j.at(s.json_key)}}.get<zob::RunConfig>();
    EXPECT_EQ(s.write(one), s.write(changed)) << s.json_key;
  }
  std::set<std::string> written;
  for (const auto& [k, v] : j.items()) written.insert(k);
  EXPECT_EQ(written, keys);
  EXPECT_EQ(nlohmann::json(j.get<zob::RunConfig>()), j);
  EXPECT_EQ(nlohmann::json(nlohmann::json::object().get<zob::RunConfig>()),
            nlohmann::json(defaults));
}

// DRIVERRESULT's workload: the settings marked for it, as the hand-over writes them, and the
// derived keys.
TEST(RunSettings, WorkloadShowsTheDeclaredSettings) {
  const zob::RunConfig c = changed_config();
  const auto w = zob::workload_json(c);
  std::set<std::string> shown, declared;
  for (const auto& [k, v] : w.items()) shown.insert(k);
  for (const char* k : zob::kWorkloadDerivedKeys) declared.insert(k);
  for (const zob::Setting& s : zob::settings()) {
    if (!s.workload) continue;
    declared.insert(s.json_key);
    EXPECT_EQ(nlohmann::json(w.at(s.json_key)), s.write(c)) << s.json_key;
  }
  EXPECT_EQ(shown, declared);
}

// Each integer flag takes its end points and refuses one past them, on the command line and
// in validate_run_config (the child's re-check).
TEST(RunSettings, RangesAreEnforcedByTheCliAndTheCheck) {
  for (const zob::Setting& f : zob::settings()) {
    if (f.kind != zob::FlagKind::integer) continue;
    SCOPED_TRACE(f.flag);
    for (const std::int64_t v : {f.min, f.max}) {
      const auto cmd = parse({f.flag, std::to_string(v)});
      EXPECT_EQ(f.get(cmd.run), v);
    }
    for (const std::int64_t v : {f.min - 1, f.max + 1}) {
      try {
        parse({f.flag, std::to_string(v)});
        ADD_FAILURE() << v << " accepted";
      } catch (const zob::UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(f.flag), std::string::npos) << e.what();
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

// Every schedule runs as exactly one registered case, named as the config names it.
TEST(Schedules, EveryScheduleHasOneCase) {
  const auto cases = zob::step_detail::schedule_cases();
  EXPECT_EQ(cases.size(), std::size(zob::kAllSchedules));
  for (zob::Schedule s : zob::kAllSchedules) {
    const zob::step_detail::ScheduleCase& c = zob::step_detail::schedule_case(s);
    EXPECT_EQ(c.id(), s);
    EXPECT_STREQ(c.name(), zob::to_string(s));
    EXPECT_STRNE(c.description(), "");
    EXPECT_EQ(std::count(cases.begin(), cases.end(), &c), 1) << c.name();
  }
}

TEST(Phase, SchemaListsExactlyThePhases) {
  const auto schema =
      nlohmann::json::parse(read_file(std::string(ZOB_SOURCE_DIR) + "/docs/result-schema.json"));
  std::vector<std::string> listed, failed_phases;
  // Every "phases" object of the schema names its keys with the same enum; a failed arm's
  // failed_phase is one of them (or null).
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "phases" && v.contains("propertyNames")) {
          listed = v.at("propertyNames").at("enum").get<std::vector<std::string>>();
        }
        if (k == "failed_phase" && v.contains("enum")) {
          for (const auto& name : v.at("enum")) {
            if (name.is_string()) failed_phases.push_back(name.get<std::string>());
          }
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
  EXPECT_EQ(failed_phases, names);
  EXPECT_FALSE(zob::parse_phase("warp_drive").has_value());
}

}  // namespace
