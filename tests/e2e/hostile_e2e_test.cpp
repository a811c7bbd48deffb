// Issue 37, "trust at the edges", through the real binary: a bad config.json is refused in one
// line naming the file, the key and the accepted range (never a flag the user did not give);
// exit codes that say what happened (a timeout, too large an `adam --params`).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;
namespace fs = std::filesystem;

// A fresh folder per test, removed at the end.
class Hostile : public FreshDirTest {
 protected:
  Hostile() : FreshDirTest("zob-hostile-") {}
  // A folder `name` holding a config.json of `text`; returns the folder.
  std::string config(const std::string& name, const std::string& text) const {
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "config.json", std::ios::binary) << text;
    return (dir_ / name).string();
  }
};

// A tiny Llama config.json with `key` set to `value` (the text as JSON has it).
std::string llama_with(const std::string& key, const std::string& value) {
  nlohmann::json j = {{"model_type", "llama"},   {"vocab_size", 256},
                      {"hidden_size", 32},       {"intermediate_size", 64},
                      {"num_hidden_layers", 2},  {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}};
  std::string text = j.dump(2);
  const std::string field = "\"" + key + "\": ";
  const std::size_t at = text.find(field);
  if (at == std::string::npos) return text.insert(1, "\n  " + field + value + ",");
  const std::size_t end = text.find_first_of(",\n", at);
  return text.replace(at + field.size(), end - at - field.size(), value);
}

std::vector<std::string> with_model(const std::string& folder) {
  return {"--device", "cpu", "--model", folder, "--batch", "1", "--seq", "8", "--dry-run"};
}

TEST_F(Hostile, ConfigJsonValuesAreNamedByTheirKeyWithTheAcceptedRange) {
  struct Case {
    std::string key, value, says;
  };
  for (const Case& c : {Case{"num_hidden_layers", "0",
                             "num_hidden_layers 0 is out of range; give "
                             "a whole number from 1 to 100000"},
                        Case{"hidden_size", "1e12", "hidden_size 1000000000000.0 is out of range"},
                        Case{"hidden_size", "-5", "hidden_size -5 is out of range"},
                        Case{"vocab_size", "\"big\"", "vocab_size \"big\" is not a whole number"},
                        Case{"intermediate_size", "64.5", "intermediate_size 64.5 is not a whole"},
                        Case{"num_attention_heads", "0", "num_attention_heads 0 is out of range"},
                        Case{"num_key_value_heads", "5",
                             "num_key_value_heads 5 is out of range; "
                             "give a whole number from 1 to 4"},
                        Case{"num_key_value_heads", "3",
                             "num_attention_heads 4 is not a multiple "
                             "of num_key_value_heads 3"},
                        Case{"head_dim", "7", "head_dim 7 is odd"}}) {
    SCOPED_TRACE(c.key + " " + c.value);
    const std::string folder = config("m", llama_with(c.key, c.value));
    const Result r = run_bench(with_model(folder));
    EXPECT_EQ(r.rc, 2) << r.err;
    expect_one_error_line(r, c.says);
    if (c.says.rfind(c.key + " ", 0) == 0 && c.key != "head_dim") {
      // A key's own refusal names the file, the key, and how to fix it.
      EXPECT_NE(r.err.find(folder + "/config.json: " + c.key), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("edit " + c.key + " in "), std::string::npos) << r.err;
    }
    // Never a flag the user did not give.
    for (const char* flag : {"--layers", "--hidden", "--vocab"}) {
      EXPECT_EQ(r.err.find(flag), std::string::npos) << flag << " in: " << r.err;
    }
  }
}

TEST_F(Hostile, ConfigJsonSyntaxErrorsGiveTheLineAndColumn) {
  // A trailing comma on line 3 (the parser stops at the closing brace on line 4, column 1).
  const std::string folder =
      config("m", "{\n  \"model_type\": \"llama\",\n  \"vocab_size\": 256,\n}\n");
  const Result r = run_bench(with_model(folder));
  EXPECT_EQ(r.rc, 2) << r.err;
  expect_one_error_line(r, folder + "/config.json: JSON syntax error at line 4, column 1");
  EXPECT_NE(r.err.find("a trailing comma"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << "the parser's raw text: " << r.err;
}

TEST_F(Hostile, AMissingKeyIsNamedAlone) {
  nlohmann::json j = nlohmann::json::parse(llama_with("num_hidden_layers", "2"));
  j.erase("intermediate_size");
  const Result r = run_bench(with_model(config("m", j.dump())));
  EXPECT_EQ(r.rc, 2) << r.err;
  expect_one_error_line(r, "has no intermediate_size; it is required");
  EXPECT_EQ(r.err.find("hidden_size"), std::string::npos) << "lists other keys: " << r.err;
}

// ------------------------------------------------------------------ exit codes

TEST_F(Hostile, ATimeoutIsReportedAsATimeoutWithItsExitCode) {
  // docs/schema.md: an arm past --timeout failed (exit 1); the probe has its own limit, so the
  // run is never "backend cpu unavailable" (exit 3).
  const Result r = run_bench(small({"--timeout", "0.001"}));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("arm registered: timed out after 0.001 s (--timeout); raise --timeout"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("unavailable"), std::string::npos) << r.err;
  const nlohmann::json d = driver_result(r.out);
  EXPECT_FALSE(d["registered"]["ok"].get<bool>());
  EXPECT_NE(d["registered"]["error"].get<std::string>().find("timed out"), std::string::npos);
}

// MemAvailable of this machine, bytes.
std::uint64_t mem_available_bytes() {
  std::istringstream in(read_text("/proc/meminfo"));
  std::string key, unit;
  for (std::uint64_t kb = 0; in >> key >> kb >> unit;) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

TEST_F(Hostile, AdamParamsBeyondTheHostIsBadInputNamingTheFlagAndTheMemory) {
  const std::uint64_t avail = mem_available_bytes();
  ASSERT_GT(avail, 0u);
  const std::string params = std::to_string(avail / 18 * 2);  // twice what fits, at 18 B each
  const Result r = run_bench({"adam", "--params", params, "--repeats", "1"});
  EXPECT_EQ(r.rc, 2) << r.err;
  expect_one_error_line(r, "adam --params " + params + " needs ");
  EXPECT_NE(r.err.find("GB available (MemAvailable); give --params "), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

// ------------------------------------------------------------------ checks that cannot run

// The shared-device check counts the device's other processes (NVML on CUDA) and watches its
// free memory; where it cannot, the run says so on stderr and in DRIVERRESULT.
TEST_F(Hostile, AnOccupancyCheckThatCannotRunSaysSo) {
  const Result cpu = run_bench(small());
  ASSERT_EQ(cpu.rc, 0) << cpu.err;
  const std::string off =
      "note: the shared-device check could not count the processes on the device (the CPU "
      "device keeps no list of its users); nor is its free memory known, so another run on it "
      "would go unnoticed";
  EXPECT_NE(cpu.err.find("zero3-offload-bench: " + off + "\n"), std::string::npos) << cpu.err;
  const auto c = driver_result(cpu.out).at("occupancy_check");
  EXPECT_EQ(c.at("processes_counted"), false);
  EXPECT_EQ(c.at("free_memory_watched"), false);
  EXPECT_EQ(c.at("note"), off.substr(6));
  // Free memory known (the hook reports it for every arm), processes counted for one arm only.
  const Result half = run_bench(small(), {{"ZOB_TEST_DEVICE_SHARED", "registered:0"}});
  ASSERT_EQ(half.rc, 0) << half.err;
  const auto h = driver_result(half.out).at("occupancy_check");
  EXPECT_EQ(h.at("processes_counted"), false);
  EXPECT_EQ(h.at("free_memory_watched"), true);
  EXPECT_NE(h.at("note").get<std::string>().find("only a fall of its free memory"),
            std::string::npos);
  // Every arm counted (0 others): nothing to say.
  const Result counted =
      run_bench(small({"--arms", "registered"}), {{"ZOB_TEST_DEVICE_SHARED", "registered:0"}});
  ASSERT_EQ(counted.rc, 0) << counted.err;
  EXPECT_EQ(counted.err.find("note: the shared-device check"), std::string::npos) << counted.err;
  const auto k = driver_result(counted.out).at("occupancy_check");
  EXPECT_EQ(k.at("processes_counted"), true);
  EXPECT_TRUE(k.at("note").is_null());
}

// ------------------------------------------------------------------ small output fixes

// The trace numbers steps from 1, warmup included, as stderr's "[arm] step i/n" and the CSV's
// step rows do.
TEST_F(Hostile, TheTraceNumbersStepsAsStderrAndTheCsvDo) {
  const std::string trace = (dir_ / "t.json").string(), csv = (dir_ / "t.csv").string();
  const Result r = run_bench(small({"--arms", "registered", "--trace", trace, "--csv", csv}));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> names;
  const nlohmann::json events = nlohmann::json::parse(read_text(trace)).at("traceEvents");
  for (const auto& e : events) {
    if (e.at("ph") == "X" && e.at("tid") == 0) names.push_back(e.at("name"));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"step 1 (warmup)", "step 2", "step 3"}));
  for (const char* line : {"[registered] step 1/3 (warmup)", "[registered] step 3/3 (timed)"}) {
    EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
  }
  const std::string rows = read_text(csv);
  EXPECT_NE(rows.find("step,registered,,2,"), std::string::npos) << rows;
  EXPECT_NE(rows.find("step,registered,,3,"), std::string::npos) << rows;
}

// DRIVERRESULT's verdicts name the arms as measured: `slow` is the arm whose steps were slower
// (by the median over rounds, else the averages), whichever arm has the change; on the CPU
// device either arm may win.
TEST_F(Hostile, TheVerdictsSlowAndFastFollowTheMeasuredSteps) {
  for (int run = 0; run < 2; ++run) {
    const Result r = run_bench(small());
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = driver_result(r.out);
    const auto& v = j.at("verdicts").at(0);
    const double slow = j.at(v.at("slow").get<std::string>()).at("step_avg_s");
    const double fast = j.at(v.at("fast").get<std::string>()).at("step_avg_s");
    EXPECT_GE(slow, fast) << v;
    EXPECT_GE(v.at("ratio").get<double>(), 1.0) << v;
    EXPECT_DOUBLE_EQ(v.at("ratio").get<double>(), slow / fast);
    EXPECT_GE(v.at("saved_s").get<double>(), 0.0) << v;
  }
}

// The chart says what ran (model, schedule, device, when), and no arm's line has a phase's
// colour.
TEST_F(Hostile, TheChartNamesTheRunAndItsArmsHaveColoursOfTheirOwn) {
  const std::string svg = (dir_ / "c.svg").string();
  const Result r = run_bench(small({"--plot", svg}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string text = read_text(svg);
  EXPECT_NE(text.find(">synthetic-h64-l2, --schedule deepspeed, cpu ("), std::string::npos);
  EXPECT_EQ(text.find(">this run<"), std::string::npos);
  const auto attr_values = [&](const std::string& marker, const std::string& attr) {
    std::set<std::string> out;
    for (std::size_t at = text.find(marker); at != std::string::npos;
         at = text.find(marker, at + 1)) {
      const std::size_t end = text.find('>', at);
      const std::size_t a = text.find(attr + "=\"", at);
      if (a == std::string::npos || a > end) continue;
      const std::size_t v = a + attr.size() + 2;
      out.insert(text.substr(v, text.find('"', v) - v));
    }
    return out;
  };
  const auto phases = attr_values("class=\"phase\"", "fill");
  const auto arms = attr_values("class=\"steps\"", "stroke");
  ASSERT_FALSE(phases.empty()) << text.substr(0, 2000);
  ASSERT_EQ(arms.size(), 2u) << text.substr(0, 2000);
  for (const std::string& c : arms) EXPECT_EQ(phases.count(c), 0u) << c << " is a phase's colour";
}

// ------------------------------------------------------------------ progress

// A long run is not silent: each arm's start says which of the run's arm runs it is and, once
// one has run, about how long the rest will take; each step line, from the first, the time
// left in its arm.
TEST_F(Hostile, ProgressEstimatesTheTimeLeftFromTheFirstStepOfEachArm) {
  const Result r = run_bench(small({"--repeats", "2"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::regex start(
      R"(zero3-offload-bench: arm (registered|unregistered) \(round [12]/2\): starting \(arm )"
      R"(run ([1-4]) of 4(; about [0-9.]+ s left in the run at the [0-9.]+ s an arm run has )"
      R"(taken)?\))");
  const std::regex step(
      R"(\[(registered|unregistered)[^\]]*\] step ([123])/3 \((warmup|timed)\): [0-9.]+ s  loss )"
      R"(\S+(  \(about [0-9.]+ s left in this arm: ([12]) more steps?\))?)");
  int starts = 0, steps = 0;
  for (const std::string& line : lines_of(r.err)) {
    std::smatch m;
    if (std::regex_match(line, m, start)) {
      ++starts;
      EXPECT_EQ(m[3].matched, m[2] != "1") << line;  // an estimate once an arm run has taken
    } else if (std::regex_match(line, m, step)) {
      ++steps;
      EXPECT_EQ(m[5].matched, m[2] != "3") << line;  // the last step has none left
      if (m[6].matched) EXPECT_EQ(std::stoi(m[6]), 3 - std::stoi(m[2])) << line;
    }
  }
  EXPECT_EQ(starts, 4) << r.err;
  EXPECT_EQ(steps, 12) << r.err;
}

}  // namespace
