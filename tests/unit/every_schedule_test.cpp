// Every schedule of the case table (kAllSchedules) through the real binary: its DRIVERRESULT
// (the --json file) validates against docs/result-schema.json, and docs/usage.md's --schedule
// row names it. A schedule added to the table without its schema or its docs fails here.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "zob/config.hpp"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The exit code of `command` run by the shell (its output to `log`).
int shell(const std::string& command, const std::string& log) {
  const int status = std::system((command + " >" + log + " 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(EverySchedule, RunsThroughTheBinaryValidatesAgainstTheSchemaAndIsInTheUsageTable) {
  const std::string source = ZOB_SOURCE_DIR;
  std::string schedule_row;
  std::istringstream usage(read_file(source + "/docs/usage.md"));
  for (std::string line; std::getline(usage, line);) {
    if (line.rfind("| `--schedule ", 0) == 0) schedule_row = line;
  }
  ASSERT_FALSE(schedule_row.empty()) << "docs/usage.md has no --schedule row";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("zob-every-schedule-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (zob::Schedule s : zob::kAllSchedules) {
    const std::string name = zob::to_string(s);
    SCOPED_TRACE("--schedule " + name);
    // "| `--schedule deepspeed\|stock\|overlap` | ...": the names between the backticks.
    const std::size_t from = schedule_row.find("--schedule ") + 11;
    std::string names = "|" + schedule_row.substr(from, schedule_row.find('`', from) - from) + "|";
    for (std::size_t at; (at = names.find("\\|")) != std::string::npos;) names.erase(at, 1);
    EXPECT_NE(names.find("|" + name + "|"), std::string::npos)
        << "docs/usage.md's --schedule row does not list " << name << ": " << schedule_row;
    const std::string json = (dir / (name + ".json")).string();
    const std::string log = (dir / (name + ".log")).string();
    const int rc = shell(std::string(ZOB_BINARY) +
                             " --device cpu --hidden 64 --layers 2 --batch 2 --seq 16 --vocab 512"
                             " --steps 2 --warmup 1 --arms registered,unregistered --schedule " +
                             name + " --json " + json,
                         log);
    ASSERT_EQ(rc, 0) << read_file(log);
    const nlohmann::json doc = nlohmann::json::parse(read_file(json));
    EXPECT_EQ(doc.at("workload").at("schedule"), name);
    const int valid = shell(
        "/usr/bin/python3 -c 'import json,sys,jsonschema; "
        "jsonschema.Draft202012Validator(json.load(open(sys.argv[1]))).validate("
        "json.load(open(sys.argv[2])))' " +
            source + "/docs/result-schema.json " + json,
        log);
    EXPECT_EQ(valid, 0) << "DRIVERRESULT of --schedule " << name
                        << " fails docs/result-schema.json:\n"
                        << read_file(log);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
