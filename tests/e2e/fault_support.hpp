// Helpers of the fault tests (faults_test.cpp, midrun_faults_test.cpp): the parent's error
// line for one arm, temporary paths, and the fake Level Zero driver's leak report (every
// arm's child appends what it never gave back when it exits).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_support.hpp"

namespace zob_e2e {

// The error line the parent prints for `arm`, or "" (and a failure) when there is none or more.
inline std::string arm_error_line(const Result& r, const std::string& arm) {
  std::string found;
  int count = 0;
  for (const auto& line : lines_of(r.err)) {
    if (line.rfind("zero3-offload-bench: error: arm " + arm + ": ", 0) == 0) {
      found = line;
      ++count;
    }
  }
  EXPECT_EQ(count, 1) << "error lines for arm " << arm << " in:\n" << r.err;
  return found;
}

inline std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("zob-e2e-" + tag + "-" + std::to_string(::getpid())))
      .string();
}

#ifdef ZOB_FAKE_ZE_DRIVER
struct LeakLine {
  int pid = 0;
  std::map<std::string, long long> counts;
};

inline std::vector<LeakLine> leak_lines(const std::string& path) {
  std::vector<LeakLine> out;
  for (const auto& line : lines_of(read_text(path))) {
    LeakLine l;
    std::istringstream in(line);
    for (std::string field; in >> field;) {
      const auto eq = field.find('=');
      if (eq == std::string::npos) continue;
      const long long v = std::stoll(field.substr(eq + 1));
      if (field.substr(0, eq) == "pid") l.pid = static_cast<int>(v);
      else l.counts[field.substr(0, eq)] = v;
    }
    out.push_back(l);
  }
  return out;
}

// Each arm's child wrote its leak line at exit, and nothing was outstanding.
inline void expect_driver_released_everything(const std::string& report, const nlohmann::json& j) {
  const auto lines = leak_lines(report);
  for (const char* arm : {"registered", "unregistered"}) {
    const int pid = j.at(arm).at("pid");
    bool found = false;
    for (const auto& l : lines) {
      if (l.pid != pid) continue;
      found = true;
      EXPECT_GE(l.counts.size(), 10u) << arm;
      for (const auto& [what, n] : l.counts) {
        EXPECT_EQ(n, 0) << arm << " (pid " << pid << ") left " << what << " outstanding";
      }
    }
    EXPECT_TRUE(found) << "no leak line for arm " << arm << " (pid " << pid << ") in:\n"
                       << read_text(report);
  }
}

inline Env xpu_env(const std::string& report, Env extra) {
  Env env{{"ZE_ENABLE_ALT_DRIVERS", ZOB_FAKE_ZE_DRIVER}, {"FAKE_ZE_LEAK_REPORT", report}};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}
#endif

}  // namespace zob_e2e
