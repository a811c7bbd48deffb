// Inputs from outside the process: saved results given to `compare`, and the bytes an arm's
// child sends the parent. Each bad one is refused with the exception its caller handles (and
// turns into one line), never undefined behaviour or a silently wrong value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "random_seed.hpp"
#include "report/json_util.hpp"
#include "zob/compare.hpp"
#include "zob/errors.hpp"
#include "zob/result.hpp"

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("zob-unit-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// A well-formed saved result with a random step time.
nlohmann::json good_doc() {
  std::mt19937_64 gen{zob::test::random_seed("good_doc")};
  const double avg = std::uniform_real_distribution<>(0.1, 2.0)(gen);
  return {{"schema_version", 1},
          {"workload", {{"hidden", 64}, {"layers", 2}}},
          {"registered", {{"step_avg_s", avg}}},
          {"unregistered", {{"step_avg_s", 2 * avg}}},
          {"speedup", 2.0}};
}

// The refusal names `origin` and contains `what`.
void expect_refused(const std::string& text, const std::string& what) {
  SCOPED_TRACE(text.substr(0, 120));
  try {
    (void)zob::parse_result_document(text, "input.json");
    ADD_FAILURE() << "accepted";
  } catch (const zob::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("input.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(CompareInput, EachBadDocumentIsRefusedNamingTheProblem) {
  expect_refused("", "not JSON");
  expect_refused("not json", "not JSON");
  expect_refused("{\"schema_version\": 1,", "not JSON");
  expect_refused("[1, 2]", "no schema_version");
  expect_refused("\"text\"", "no schema_version");
  expect_refused(R"({"workload": {}, "registered": {}})", "no schema_version");
  expect_refused(R"({"schema_version": 2, "workload": {}})", "schema_version 2");
  expect_refused(R"({"schema_version": "1", "workload": {}})", "schema_version");
  expect_refused("{\"schema_version\": 1, \"workload\": {\"h\": \"\xff\xfe\"}}", "not JSON");
  expect_refused(R"({"schema_version": 1.5, "workload": {}})", "schema_version");
  expect_refused(R"({"schema_version": 1e400, "workload": {}})", "not JSON");  // overflows
  expect_refused(R"({"schema_version": 99999999999999999999999, "workload": {}})",
                 "schema_version");
  expect_refused(R"({"schema_version": 1, "registered": {}})", "no workload");
  expect_refused(R"({"schema_version": 1, "workload": [], "registered": {}})", "no workload");
  expect_refused(R"({"schema_version": 1, "workload": {}, "registered": 3})", "not an object");
  // empty arm list: nothing to compare
  expect_refused(R"({"schema_version": 1, "workload": {"hidden": 64}})", "no arm results");
  expect_refused(R"({"schema_version": 1, "workload": {}, "registered": null})", "no arm results");
  // duplicate arms (nlohmann would keep the last one silently), and duplicates deeper down
  expect_refused(R"({"schema_version": 1, "workload": {}, "registered": {"step_avg_s": 1},
                     "registered": {"step_avg_s": 2}})",
                 "\"registered\" twice");
  expect_refused(R"({"schema_version": 1, "workload": {"hidden": 64, "hidden": 128},
                     "registered": {}})",
                 "\"hidden\" twice");
}

TEST(CompareInput, GoodDocumentsStillParseAndHugeNumbersAreJustNumbers) {
  auto doc = good_doc();
  EXPECT_EQ(zob::parse_result_document(doc.dump(), "a"), doc);
  EXPECT_EQ(zob::parse_result_document("progress\nDRIVERRESULT=" + doc.dump() + "\n", "a"), doc);
  // Same key in different objects is fine.
  doc["unregistered"]["step_avg_s"] = 1e308;
  doc["registered"]["registered"] = 1;
  EXPECT_EQ(zob::parse_result_document(doc.dump(), "a"), doc);
  const auto a = temp_file("huge-a.json", doc.dump());
  const auto b = temp_file("huge-b.json", good_doc().dump());
  const auto c = zob::compare_results({{a, b}, false});
  EXPECT_NE(c.text.find("unregistered"), std::string::npos) << c.text;
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

TEST(CompareInput, FilesThatCannotBeReadOrDifferAreRefused) {
  const auto a = temp_file("ok.json", good_doc().dump());
  auto other = good_doc();
  other["workload"]["hidden"] = 128;
  const auto b = temp_file("differs.json", other.dump());
  EXPECT_THROW(zob::compare_results({{a, b}, false}), zob::UsageError);
  EXPECT_NO_THROW(zob::compare_results({{a, b}, true}));
  EXPECT_THROW(zob::compare_results({{a, "/nonexistent-zob/x.json"}, false}), zob::UsageError);
  EXPECT_THROW(zob::compare_results({{a, std::filesystem::temp_directory_path().string()}, false}),
               zob::UsageError);
  EXPECT_THROW(zob::compare_results({{a}, false}), zob::UsageError);
  EXPECT_THROW(zob::compare_results({{}, false}), zob::UsageError);
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

// ------------------------------------------------------------------ the child -> parent pipe

nlohmann::json pipe_result() {
  zob::ArmResult r;
  r.arm = zob::Arm::unregistered;
  r.ok = true;
  r.steps = 2;
  r.warmup = 1;
  r.samples.resize(3);
  r.samples[1].wall_s = 0.5;
  r.samples[2].wall_s = 0.25;
  return nlohmann::json(r);
}

TEST(PipeInput, OutOfRangeIntegersAreMalformedNotUndefined) {
  const std::vector<std::pair<const char*, nlohmann::json>> bad{
      {"steps", 1e300},          {"steps", 2147483648.0}, {"steps", 4294967296ull},
      {"warmup", -2147483649ll}, {"adam_threads", 1.5},   {"pid", 1e20},
      {"locked_bytes", -1},      {"params", 9.3e18},      {"batch", "2"},
      {"registered_bytes", 1.0}};
  for (const auto& [key, value] : bad) {
    SCOPED_TRACE(std::string(key) + " = " + value.dump());
    nlohmann::json j = pipe_result();
    j[key] = value;
    EXPECT_THROW(j.get<zob::ArmResult>(), nlohmann::json::exception);
  }
  nlohmann::json j = pipe_result();
  j["device_info"]["numa_node"] = 1e10;
  EXPECT_THROW(j.get<zob::ArmResult>(), nlohmann::json::exception);
  j = pipe_result();
  j["samples"][0]["phases"]["adam"] = {
      {"device_s", nullptr}, {"host_s", 0.1}, {"bytes", -5}, {"params", 1}};
  EXPECT_THROW(j.get<zob::ArmResult>(), nlohmann::json::exception);
}

TEST(PipeInput, ExtremeButValidValuesSurvive) {
  nlohmann::json j = pipe_result();
  j["locked_bytes"] = std::numeric_limits<std::uint64_t>::max();
  j["params"] = std::numeric_limits<std::int64_t>::min();
  j["pid"] = std::numeric_limits<int>::max();
  j["samples"][2]["loss"] = 1e39;  // beyond float: infinite, not undefined
  const auto r = j.get<zob::ArmResult>();
  EXPECT_EQ(r.locked_bytes, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(r.params, std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(r.pid, std::numeric_limits<int>::max());
  EXPECT_TRUE(std::isinf(r.samples[2].loss));
  EXPECT_EQ(r.timed_step_s(), (std::vector<double>{0.5, 0.25}));
}

TEST(PipeInput, UnknownArmNameIsAUsageError) {
  nlohmann::json j = pipe_result();
  j["arm"] = "bogus";
  EXPECT_THROW(j.get<zob::ArmResult>(), zob::UsageError);
}

}  // namespace
