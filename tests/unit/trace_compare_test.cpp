#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "zob/compare.hpp"
#include "zob/errors.hpp"
#include "zob/trace.hpp"

namespace fs = std::filesystem;

namespace {

zob::ArmResult arm_with_spans() {
  zob::ArmResult a;
  a.warmup = 1;
  for (int i = 0; i < 2; ++i) {
    zob::StepSample s;
    s.wall_s = 0.25;
    s.spans = {{"compute", "forward", 0.0, 0.01},
               {"d2h", "grad layer0", 0.02, 0.005},
               {"cpu_adam", "adam[0]", 0.03, 0.1},
               {"h2d", "copy_back[0]", 0.13, 0.02}};
    a.samples.push_back(s);
  }
  return a;
}

nlohmann::json result_doc(double reg, double unreg, int hidden, const std::string& backend) {
  return {{"schema_version", 1},
          {"workload", {{"hidden", hidden}, {"layers", 2}}},
          {"environment", {{"device", {{"backend", backend}}}}},
          {"registered", {{"step_avg_s", reg}}},
          {"unregistered", {{"step_avg_s", unreg}}},
          {"speedup", unreg / reg}};
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path =
      (fs::temp_directory_path() / ("zob_" + std::to_string(getpid()) + "_" + name)).string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(Trace, EveryEventIsCompleteAndTracksAreNamed) {
  const auto a = arm_with_spans();
  const auto t = zob::chrome_trace({{"registered", &a}, {"unregistered", &a}});
  ASSERT_TRUE(t["traceEvents"].is_array());
  int spans = 0, thread_names = 0;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name"));
    if (e["ph"] == "X") {
      ++spans;
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_GE(e["ts"].get<double>(), 0);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") ++thread_names;
  }
  EXPECT_EQ(spans, 2 * 2 * (4 + 1));     // 2 runs x 2 steps x (4 spans + the step)
  EXPECT_EQ(thread_names, 2 * (4 + 1));  // 4 tracks + "steps", per run
  // The second step's spans are offset by the first step's wall time.
  bool found = false;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "adam[0]" && e["pid"] == 1 &&
        e["ts"].get<double>() > 200000) {
      EXPECT_NEAR(e["ts"].get<double>(), 250000 + 30000, 1e-6);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(Compare, SideBySideWithRatios) {
  const auto a = write_temp("a.json", result_doc(0.25, 0.6, 64, "cuda").dump());
  const auto b = write_temp(
      "b.txt", "some progress\nDRIVERRESULT=" + result_doc(0.5, 0.9, 64, "xpu").dump() + "\n");
  const auto c = zob::compare_results({{a, b}, false});
  EXPECT_NEAR(c.doc["arms"]["registered"][1]["ratio_to_first"].get<double>(), 2.0, 1e-12);
  EXPECT_NEAR(c.doc["speedup"][0].get<double>(), 2.4, 1e-12);
  EXPECT_NE(c.text.find("(xpu)"), std::string::npos) << c.text;
  EXPECT_NE(c.text.find("x2.000"), std::string::npos) << c.text;
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST(Compare, RefusesDifferentWorkloadsUnlessForced) {
  const auto a = write_temp("c.json", result_doc(0.25, 0.6, 64, "cuda").dump());
  const auto b = write_temp("d.json", result_doc(0.25, 0.6, 128, "cuda").dump());
  try {
    zob::compare_results({{a, b}, false});
    ADD_FAILURE() << "expected a refusal";
  } catch (const zob::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("hidden is 64"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(zob::compare_results({{a, b}, true}));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST(Compare, BadInputsAreUsageErrors) {
  EXPECT_THROW(zob::parse_result_document("not json", "x"), zob::UsageError);
  EXPECT_THROW(zob::parse_result_document("[1,2]", "x"), zob::UsageError);
  EXPECT_THROW(zob::parse_result_document(R"({"schema_version": 99, "workload": {}})", "x"),
               zob::UsageError);
  EXPECT_THROW(zob::parse_result_document(R"({"schema_version": 1})", "x"), zob::UsageError);
  EXPECT_THROW(
      zob::parse_result_document(R"({"schema_version": 1, "workload": {}, "registered": 3})", "x"),
      zob::UsageError);
  EXPECT_THROW(zob::compare_results({{"/nonexistent/a.json", "/nonexistent/b.json"}, false}),
               zob::UsageError);
  EXPECT_THROW(zob::compare_results({{"only-one.json"}, false}), zob::UsageError);
}
