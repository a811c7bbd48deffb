// The real binary: --repeats, the phase / registration / environment output, step statistics,
// --trace, the pre-flight refusal under a low RLIMIT_MEMLOCK, validation of disagreeing arms,
// the compare subcommand and --list-devices.
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("zob-insight-" + std::to_string(::getpid()) + "-" + name);
}

// small() with some of its flags given other values (in place: a flag given twice would also
// do, the last one wins, but the command line stays readable).
std::vector<std::string> small_with(const std::vector<std::pair<std::string, std::string>>& values,
                                    std::vector<std::string> extra = {}) {
  auto args = small();
  for (const auto& [flag, value] : values) {
    const auto it = std::find(args.begin(), args.end(), flag);
    EXPECT_NE(it, args.end()) << flag;
    if (it != args.end()) *(it + 1) = value;
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<double> doubles(const nlohmann::json& a) {
  std::vector<double> out;
  for (const auto& x : a) out.push_back(x.get<double>());
  return out;
}

// Arms alternate: registered, unregistered, registered, unregistered.
void expect_interleaved_arms(const std::string& err) {
  std::vector<std::string> order;
  for (const auto& line : lines_of(err)) {
    const auto at = line.find("arm ");
    if (line.find(": starting") != std::string::npos && at != std::string::npos) {
      order.push_back(line.substr(at + 4, line.find(' ', at + 4) - at - 4));
    }
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"registered", "unregistered", "registered", "unregistered"}))
      << err;
}

// One arm of a two-round run: its step statistics, rounds (a fresh pid each) and phases.
void expect_arm_statistics(const nlohmann::json& a, std::set<int>& pids,
                           std::vector<double>& round_medians) {
  const auto times = doubles(a.at("step_times_s"));
  ASSERT_EQ(times.size(), 4u);  // 2 timed steps x 2 rounds
  const double mean = std::accumulate(times.begin(), times.end(), 0.0) / 4;
  EXPECT_NEAR(a.at("step_avg_s").get<double>(), mean, 1e-12 * mean);
  EXPECT_EQ(a.at("step_min_s").get<double>(), *std::min_element(times.begin(), times.end()));
  EXPECT_EQ(a.at("losses").size(), 1u + 4u);  // round 1's warmup, then every timed step
  const auto& st = a.at("step_stats");
  EXPECT_EQ(st.at("n"), 4);
  EXPECT_NEAR(st.at("median").get<double>(), median_of(times), 1e-15);
  EXPECT_EQ(st.at("max").get<double>(), *std::max_element(times.begin(), times.end()));
  double ss = 0;
  for (double t : times) ss += (t - mean) * (t - mean);
  EXPECT_NEAR(st.at("stddev").get<double>(), std::sqrt(ss / 3), 1e-12);
  const auto& rounds = a.at("rounds");
  ASSERT_EQ(rounds.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& rd = rounds[k];
    EXPECT_TRUE(pids.insert(rd.at("pid").get<int>()).second) << "pid reused: " << rd;
    EXPECT_EQ(rd.at("param_checksum"), a.at("param_checksum"));
    const std::vector<double> mine{times[2 * k], times[2 * k + 1]};
    EXPECT_NEAR(rd.at("step_median_s").get<double>(), median_of(mine), 1e-15);
    round_medians.push_back(rd.at("step_median_s").get<double>());
  }
  EXPECT_EQ(a.at("pid"), rounds[0].at("pid"));
  EXPECT_TRUE(a.at("phases").contains("adam"));
  for (const char* phase : {"forward", "backward", "grad_offload", "adam", "copy_back"}) {
    const auto& p = a.at("phases").at(phase);
    for (const char* key : {"device_s", "host_s", "bytes", "params", "gb_per_s"}) {
      EXPECT_TRUE(p.contains(key)) << phase << "." << key;
    }
    EXPECT_TRUE(p.at("bytes").is_number_integer()) << phase;
  }
  const auto& adam = a.at("phases").at("adam");
  EXPECT_EQ(adam.at("bytes").get<std::int64_t>(), 28 * adam.at("params").get<std::int64_t>());
  EXPECT_GT(adam.at("gparams_per_s").get<double>(), 0);
  EXPECT_TRUE(a.contains("register_s_per_gib"));
}

// speedup, speedup_median and its interval from the rounds' medians; warnings; environment.
void expect_run_figures(const nlohmann::json& j, const std::string& err,
                        std::map<std::string, std::vector<double>>& round_median) {
  std::vector<double> round_ratio;
  for (std::size_t k = 0; k < 2; ++k) {
    round_ratio.push_back(round_median["unregistered"][k] / round_median["registered"][k]);
  }
  const double reg = j.at("registered").at("step_avg_s"),
               unreg = j.at("unregistered").at("step_avg_s");
  EXPECT_NEAR(j.at("speedup").get<double>(), unreg / reg, 1e-12 * unreg / reg);
  EXPECT_NEAR(j.at("speedup_median").get<double>(), median_of(round_ratio), 1e-9);
  const auto& iv = j.at("speedup_interval");
  EXPECT_EQ(iv.at("method"), "range");  // 2 rounds are too few for an order-statistic interval
  EXPECT_DOUBLE_EQ(iv.at("low").get<double>(), std::min(round_ratio[0], round_ratio[1]));
  EXPECT_DOUBLE_EQ(iv.at("high").get<double>(), std::max(round_ratio[0], round_ratio[1]));
  EXPECT_EQ(j.at("validation").at("rounds_equal"), true);
  EXPECT_TRUE(j.at("warnings").is_array());
  // Each warning is on stderr too.
  for (const auto& w : j.at("warnings")) {
    EXPECT_NE(err.find("warning: " + w.get<std::string>()), std::string::npos);
  }
  const auto& env = j.at("environment");
  EXPECT_EQ(env.at("device").at("backend"), "cpu");
  EXPECT_FALSE(env.at("kernel").get<std::string>().empty());
  EXPECT_GT(env.at("mem_total_bytes").get<std::uint64_t>(), 0u);
}

// stdout: "# " header, then the Python script's table and speedup line unchanged, the phase
// section, the registration lines, DRIVERRESULT last.
void expect_stdout_layout(const std::string& out) {
  const auto lines = lines_of(out);
  std::size_t i = 0;
  while (i < lines.size() && lines[i].rfind("# ", 0) == 0) ++i;
  EXPECT_GE(i, 5u) << out;
  EXPECT_EQ(lines[0].rfind("# zero3-offload-bench ", 0), 0u);
  for (const char* part : {"# device: ", "# host: ", "# memory: MemAvailable", "# kernel: "}) {
    EXPECT_NE(out.find(part), std::string::npos) << part;
  }
  ASSERT_LT(i + 3, lines.size());
  EXPECT_EQ(lines[i].rfind("arm ", 0), 0u) << lines[i];
  EXPECT_EQ(lines[i + 1].rfind("registered ", 0), 0u);
  EXPECT_EQ(lines[i + 2].rfind("unregistered ", 0), 0u);
  EXPECT_EQ(lines[i + 3].rfind("speedup: ", 0), 0u);
  EXPECT_EQ(lines[i + 4].rfind("phase ", 0), 0u);
  int phase_rows = 0, registration = 0;
  for (const auto& line : lines) {
    if (line.rfind("adam ", 0) == 0) {
      ++phase_rows;
      EXPECT_NE(line.find("Gparam/s"), std::string::npos) << line;
    }
    if (line.rfind("registration: ", 0) == 0) ++registration;
  }
  EXPECT_EQ(phase_rows, 2);
  EXPECT_EQ(registration, 2);
  EXPECT_EQ(lines.back().rfind("DRIVERRESULT=", 0), 0u);
}

TEST(Insight, RepeatsInterleaveFreshProcessesAndReportStatistics) {
  const Result r = run_bench(small({"--repeats", "2"}));
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_interleaved_arms(r.err);
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at("repeats"), 2);
  std::set<int> pids;
  std::map<std::string, std::vector<double>> round_median;
  for (const char* arm : {"registered", "unregistered"}) {
    SCOPED_TRACE(arm);
    expect_arm_statistics(j.at(arm), pids, round_median[arm]);
  }
  EXPECT_EQ(pids.size(), 4u);
  expect_run_figures(j, r.err, round_median);
  expect_stdout_layout(r.out);
}

TEST(Insight, TraceHoldsEveryArmRunOnFourTracks) {
  const auto path = temp_path("trace.json");
  const Result r = run_bench(small({"--repeats", "2", "--trace", path.string()}));
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const auto trace = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  const auto& events = trace.at("traceEvents");
  std::map<int, std::string> process;                // pid -> label
  std::map<std::pair<int, int>, std::string> track;  // (pid, tid) -> name
  std::map<std::pair<int, int>, int> spans;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(ph == "M" || ph == "X") << e;
    const int pid = e.at("pid"), tid = e.value("tid", 0);
    if (ph == "M" && e.at("name") == "process_name") process[pid] = e.at("args").at("name");
    if (ph == "M" && e.at("name") == "thread_name") track[{pid, tid}] = e.at("args").at("name");
    if (ph == "X") {
      EXPECT_GE(e.at("dur").get<double>(), 0) << e;
      EXPECT_TRUE(e.at("ts").is_number()) << e;
      ++spans[{pid, tid}];
    }
  }
  std::set<std::string> labels;
  for (const auto& [pid, label] : process) labels.insert(label);
  EXPECT_EQ(labels, (std::set<std::string>{"registered", "unregistered", "registered #2",
                                           "unregistered #2"}));
  for (const auto& [pid, label] : process) {
    SCOPED_TRACE(label);
    std::set<std::string> names;
    for (const auto& [key, name] : track) {
      if (key.first != pid) continue;
      names.insert(name);
      EXPECT_GT(spans[key], 0) << name;  // every named track has spans
    }
    for (const char* t : {"steps", "compute", "h2d", "d2h", "cpu_adam"}) {
      EXPECT_TRUE(names.count(t)) << t;
    }
  }
}

// Runs in the forked child before exec: root regains every capability at execve from its
// bounding and inheritable sets, so CAP_IPC_LOCK goes from those as well as from the
// effective and permitted sets; then the memlock limit drops to 1 MiB.
void drop_ipc_lock_and_limit_memlock() {
  if (::prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0) ::_exit(126);
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) ::_exit(126);
  const unsigned bit = 1u << (CAP_IPC_LOCK % 32);
  auto& d = data[CAP_IPC_LOCK / 32];
  d.effective &= ~bit;
  d.permitted &= ~bit;
  d.inheritable &= ~bit;
  if (::syscall(SYS_capset, &header, data) != 0) ::_exit(126);
  const rlimit limit{1 << 20, 1 << 20};
  if (::setrlimit(RLIMIT_MEMLOCK, &limit) != 0) ::_exit(126);
}

TEST(Insight, PreflightRefusesLockingArmsUnderALowMemlockLimit) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop CAP_IPC_LOCK from the bounding set";
  // 8 B/param pinned: about 4.7 MB here, well above the 1 MiB limit.
  const auto args = small_with({{"--vocab", "4096"}});
  const Result refused = run_bench(args, {}, nullptr, 60, drop_ipc_lock_and_limit_memlock);
  expect_no_leftovers();
  ASSERT_NE(refused.rc, 126) << "could not drop CAP_IPC_LOCK / lower RLIMIT_MEMLOCK";
  EXPECT_EQ(refused.rc, 2) << refused.err;
  EXPECT_TRUE(refused.out.empty()) << refused.out;
  expect_one_error_line(refused, "RLIMIT_MEMLOCK (per process) is 1048576 bytes");
  EXPECT_NE(refused.err.find("pre-flight"), std::string::npos);

  auto unlocked = args;
  unlocked.insert(unlocked.end(), {"--arms", "pageable,hostalloc"});
  const Result ran = run_bench(unlocked, {}, nullptr, 60, drop_ipc_lock_and_limit_memlock);
  expect_no_leftovers();
  EXPECT_EQ(ran.rc, 0) << ran.err;
  EXPECT_EQ(driver_result(ran.out).at("environment").at("memlock_limit_bytes"), 1 << 20);

  // --skip-preflight lets the run start; the arm then fails at mlock itself (exit 1).
  auto skipped = args;
  skipped.insert(skipped.end(), {"--arms", "unregistered", "--skip-preflight"});
  const Result failed = run_bench(skipped, {}, nullptr, 60, drop_ipc_lock_and_limit_memlock);
  expect_no_leftovers();
  EXPECT_EQ(failed.rc, 1) << failed.err;
  EXPECT_EQ(driver_result(failed.out).at("unregistered").at("ok"), false);
}

TEST(Insight, DisagreeingArmExitsOneNamingTheFirstDifferingStep) {
  const Result r =
      run_bench(small({"--repeats", "2"}), {{"ZOB_TEST_CHILD_FAULT", "unregistered:perturb"}});
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 1) << r.err;
  // warmup 1: the first timed step is step 2.
  EXPECT_NE(r.err.find("error: the arms disagree: loss of step 2 (timed) differs"),
            std::string::npos)
      << r.err;
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at("validation").at("ok"), false);
  EXPECT_EQ(j.at("validation").at("losses_equal"), false);
  EXPECT_EQ(j.at("validation").at("rounds_equal"), true);  // perturbed alike in both rounds
}

// A probe that misread the host memory (1000 times too slow: ZOB_TEST_CHILD_FAULT probe_low)
// puts the physical bound above the arm's steps. The bound is not moved to fit them: the run
// says the bound is not known and names the probe as unreliable, in its text and DRIVERRESULT.
TEST(Insight, AStepThatBeatsThePhysicalBoundMakesItNotKnown) {
  const Result r = run_bench(small(), {{"ZOB_TEST_CHILD_FAULT", "unregistered:probe_low"}});
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("physical bound: unregistered: not known: its fastest step"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("the probe is unreliable for this run"), std::string::npos) << r.out;
  const auto b = driver_result(r.out).at("unregistered").at("bound");
  EXPECT_EQ(b.at("beaten"), true);
  EXPECT_EQ(b.at("physical_verdict"), "not known");
  EXPECT_DOUBLE_EQ(b.at("host_gb_per_s").get<double>(), b.at("probe_gb_per_s").get<double>());
  EXPECT_LT(b.at("fastest_step_s").get<double>(), b.at("physical_s").get<double>());
  EXPECT_LT(b.at("physical_ratio").get<double>(), 1.0);
}

std::string write_run(const std::string& name,
                      const std::vector<std::pair<std::string, std::string>>& values,
                      std::vector<std::string> extra = {}) {
  const auto path = temp_path(name).string();
  extra.insert(extra.end(), {"--json", path});
  const Result r = run_bench(small_with(values, extra));
  EXPECT_EQ(r.rc, 0) << r.err;
  return path;
}

TEST(Insight, CompareSavedRunsAndRefuseDifferentWorkloads) {
  const std::string a = write_run("a.json", {});
  const std::string b = write_run("b.json", {}, {"--arms", "unregistered,registered"});
  const std::string c = write_run("c.json", {{"--hidden", "32"}});
  expect_no_leftovers();
  const auto ja = nlohmann::json::parse(std::ifstream(a));
  const auto jb = nlohmann::json::parse(std::ifstream(b));

  const auto out = temp_path("cmp.json").string();
  const Result same = run_bench({"compare", a, b, "--json", out});
  EXPECT_EQ(same.rc, 0) << same.err;
  const auto lines = lines_of(same.out);
  ASSERT_GE(lines.size(), 4u) << same.out;
  EXPECT_EQ(lines[0].rfind("arm", 0), 0u);
  EXPECT_NE(lines[0].find("a.json (cpu)"), std::string::npos) << lines[0];
  EXPECT_NE(same.out.find("\nregistered "), std::string::npos);
  EXPECT_NE(same.out.find("\nspeedup "), std::string::npos);
  const auto doc = nlohmann::json::parse(std::ifstream(out));
  const double ratio = jb.at("registered").at("step_avg_s").get<double>() /
                       ja.at("registered").at("step_avg_s").get<double>();
  EXPECT_NEAR(doc.at("arms").at("registered")[1].at("ratio_to_first").get<double>(), ratio,
              1e-12 * ratio);
  std::filesystem::remove(out);

  const Result refused = run_bench({"compare", a, c});
  EXPECT_EQ(refused.rc, 2);
  EXPECT_TRUE(refused.out.empty());
  expect_one_error_line(refused, "hidden is 64");
  const Result forced = run_bench({"compare", a, c, "--force"});
  EXPECT_EQ(forced.rc, 0) << forced.err;

  // Captured stdout works as well as a --json file.
  const auto captured = temp_path("stdout.txt").string();
  std::ofstream(captured) << "# header\nDRIVERRESULT=" << ja.dump() << "\n";
  EXPECT_EQ(run_bench({"compare", captured, a}).rc, 0);

  // A file from before workload.decoder existed (no key) against one whose decoder is null
  // (the synthetic model): absent and null both mean "does not apply".
  ASSERT_TRUE(ja.at("workload").at("decoder").is_null());
  auto older = jb;
  older.at("workload").erase("decoder");
  const auto older_file = temp_path("older.json").string();
  std::ofstream(older_file) << older.dump();
  EXPECT_EQ(run_bench({"compare", a, older_file}).rc, 0);

  // Bad inputs: one line, exit 2.
  const auto not_json = temp_path("not.json").string();
  std::ofstream(not_json) << "registered 0.1 0.1\n";
  const auto wrong_schema = temp_path("schema.json").string();
  auto bumped = ja;
  bumped["schema_version"] = 99;
  std::ofstream(wrong_schema) << bumped.dump();
  const auto foreign = temp_path("foreign.json").string();
  std::ofstream(foreign) << R"({"name": "something else"})";
  struct Bad {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Bad& bad :
       std::vector<Bad>{{{"compare", a, temp_path("missing.json").string()}, "cannot read"},
                        {{"compare", a, not_json}, "is not JSON"},
                        {{"compare", a, wrong_schema}, "schema_version 99"},
                        {{"compare", foreign, a}, "not a zero3-offload-bench result"},
                        {{"compare", a}, "at least two"}}) {
    SCOPED_TRACE(testing::PrintToString(bad.args));
    const Result r = run_bench(bad.args);
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    expect_one_error_line(r, bad.says);
  }
  for (const auto& p : {a, b, c, captured, not_json, wrong_schema, foreign}) {
    std::filesystem::remove(p);
  }
  expect_no_leftovers();
}

TEST(Insight, ListDevicesSaysWhatIsThereAndWhyNot) {
  const auto empty = temp_path("no-plugins");
  std::filesystem::create_directories(empty);
  const Result r = run_bench({"--list-devices"}, {{"ZOB_PLUGIN_DIR", empty.string()}});
  std::filesystem::remove_all(empty);
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].rfind("cpu   available: ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("cuda  unavailable: ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("no CUDA backend"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind("xpu   ", 0), 0u) << lines[2];

  const Result fake = run_bench({"--list-devices"}, {{"ZOB_PLUGIN_DIR", ZOB_FAKE_PLUGIN_DIR}});
  expect_no_leftovers();
  EXPECT_EQ(fake.rc, 0);
  EXPECT_NE(fake.out.find("cuda  unavailable: fake plugin: no CUDA device"), std::string::npos)
      << fake.out;
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
