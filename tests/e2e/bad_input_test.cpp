// Bad input through the real binary: every flag, every subcommand's inputs. Each refusal must be
// one line on stderr, nothing on stdout, exit 2, and must happen before any process is started:
// the benchmark runs under a seccomp filter that makes creating a process fail (threads stay
// allowed), so a refusal that came only after spawning the probe would show up as a different
// error and exit code. Also: the output stays valid JSON whatever the host or device is called.
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;

// In the forked test process, before exec: fork, vfork and clone without CLONE_VM fail with
// EPERM (clone3 with ENOSYS, so that glibc falls back to clone for threads). Threads and
// LeakSanitizer's tracer (clone with CLONE_VM) still work. Returns 0, or 95 when the filter
// could not be installed; on other architectures nothing is filtered.
int forbid_new_processes() {
#if defined(__x86_64__)
  constexpr unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr unsigned arch = AUDIT_ARCH_AARCH64;
#else
  return 0;
#endif
  const unsigned deny = SECCOMP_RET_ERRNO | EPERM;
  std::vector<sock_filter> f;
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  auto return_if = [&f](unsigned nr, unsigned action) {
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, action));
  };
  return_if(__NR_clone3, SECCOMP_RET_ERRNO | ENOSYS);
#ifdef __NR_fork
  return_if(__NR_fork, deny);
#endif
#ifdef __NR_vfork
  return_if(__NR_vfork, deny);
#endif
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3));
  f.push_back(
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));  // flags, low word
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_VM, 1, 0));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, deny));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 95;
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 95;
  return 0;
}

Result run_refused(const std::vector<std::string>& args) {
  RunOptions o;
  o.before_exec = forbid_new_processes;
  o.limit_s = 30;
  return run_bench_with(args, o);
}

// Exit 2, one "error: <what>; <fix>" line, no stdout, no sign of a device probe or an arm.
void expect_refused(const std::vector<std::string>& args, const std::string& contains = "; ") {
  SCOPED_TRACE(testing::PrintToString(args));
  const Result r = run_refused(args);
  ASSERT_NE(r.rc, 95) << "could not install the seccomp filter";
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  expect_one_error_line(r, contains);
  for (const char* progress : {"arm ", "device ", "[registered]", "starting"}) {
    EXPECT_EQ(r.err.find(std::string("zero3-offload-bench: ") + progress), std::string::npos)
        << r.err;
  }
}

// The control: the same filter makes a valid run fail, so the refusals above really happened
// before anything was spawned.
TEST(BadInput, TheNoSpawnFilterStopsAValidRun) {
  const Result r = run_refused(small());
  expect_no_leftovers();
  ASSERT_NE(r.rc, 95) << "could not install the seccomp filter";
  EXPECT_NE(r.rc, 0) << r.err;
  EXPECT_NE(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("fork"), std::string::npos) << r.err;
}

struct BadFlag {
  std::vector<std::string> args;
  const char* names;   // the refusal names this
  bool alone = false;  // not on top of the small workload's flags
};

TEST(BadInput, EveryRunFlagRefusesBadValues) {
  const std::string huge = "99999999999999999999999999";
  const std::vector<BadFlag> cases{
      {{"--hidden", "0"}, "--hidden"},
      {{"--hidden", "-1"}, "--hidden"},
      {{"--hidden", "1048577"}, "--hidden"},
      {{"--hidden", "1e3"}, "--hidden"},
      {{"--hidden", ""}, "--hidden"},
      {{"--hidden", huge}, "--hidden"},
      {{"--hidden", " 64"}, "--hidden"},
      {{"--layers", "0"}, "--layers"},
      {{"--layers", "100001"}, "--layers"},
      {{"--batch", "0"}, "--batch"},
      {{"--batch", "x"}, "--batch"},
      {{"--seq", "0"}, "--seq"},
      {{"--seq", "16777217"}, "--seq"},
      {{"--vocab", "0"}, "--vocab"},
      {{"--vocab", "2147483648"}, "--vocab"},
      {{"--steps", "0"}, "--steps"},
      {{"--steps", "1000001"}, "--steps"},
      {{"--warmup", "-1"}, "--warmup"},
      {{"--device", "tpu"}, "--device"},
      {{"--device", ""}, "--device"},
      {{"--device", "CPU"}, "--device"},
      {{"--device-index", "-1"}, "--device-index"},
      {{"--device-index", "1024"}, "--device-index"},
      {{"--arms", ""}, "--arms"},
      {{"--decoder", "eager", "--schedule", "stock"},
       "--decoder eager"},  // the synthetic model too
      {{"--decoder", "unfused"}, "--decoder"},
      {{"--arms", ","}, "--arms"},
      {{"--arms", "registered,"}, "--arms"},
      {{"--arms", "bogus"}, "--arms"},
      {{"--arms", "registered,unregistered,registered"}, "twice"},
      {{"--chunk-elems", "0"}, "--chunk-elems"},
      {{"--chunk-elems", "1125899906842625"}, "--chunk-elems"},
      {{"--sub-group-size", "0"}, "--sub-group-size"},
      {{"--offload-ratio", "1.5", "--schedule", "deepspeed"}, "--offload-ratio"},
      {{"--offload-ratio", "-0.1", "--schedule", "deepspeed"}, "--offload-ratio"},
      {{"--offload-ratio", "nan", "--schedule", "deepspeed"}, "--offload-ratio"},
      {{"--offload-ratio", "0.5,", "--schedule", "deepspeed"}, "--offload-ratio"},
      {{"--offload-ratio", "0.5,0.5", "--schedule", "deepspeed"}, "twice"},
      {{"--offload-ratio", "0.5", "--schedule", "stock"}, "--offload-ratio applies to"},
      {{"--threads", "0"}, "--threads"},
      {{"--threads", "4097"}, "--threads"},
      {{"--seed", "-1"}, "--seed"},
      {{"--seed", "18446744073709551616"}, "--seed"},
      {{"--seed", "0x10"}, "--seed"},
      {{"--timeout", "-1"}, "--timeout"},
      {{"--timeout", "nan"}, "--timeout"},
      {{"--timeout", "inf"}, "--timeout"},
      {{"--timeout", "1e300"}, "--timeout"},
      {{"--timeout", "soon"}, "--timeout"},
      {{"--json", ""}, "--json"},
      {{"--json", "/"}, "--json"},
      {{"--json", "/nonexistent-zob-dir/x.json"}, "--json"},
      {{"--json", "/proc/zob-not-writable.json"}, "--json"},
      // a device where a folder should be; a closed descriptor (issue 37)
      {{"--json", "/dev/null/x.json"}, "a file stands where a folder should"},
      {{"--csv", "/dev/null/x.csv"}, "--csv"},
      {{"--trace", "/dev/fd/97"}, "no such open descriptor"},
      {{"--bogus-flag"}, "--bogus-flag"},
      {{"positional-junk"}, "positional-junk"},
      {{"--hidden"}, "--hidden"},  // a value flag at the end, without its value
      {{"--offload-param=maybe"}, "--offload-param"},
      // byte counts beyond 64 bits, and models beyond any host's memory
      {{"--hidden", "1048576", "--layers", "100000", "--vocab", "2147483647"}, "64 bits", true},
      {{"--batch", "1048576", "--seq", "16777216"}, "--batch", true},
      {{"--hidden", "65536", "--layers", "1000"}, "host memory", true},
  };
  for (const auto& c : cases) {
    auto args = c.alone ? std::vector<std::string>{} : small();
    args.insert(args.end(), c.args.begin(), c.args.end());
    expect_refused(args, c.names);
  }
  expect_no_leftovers();
}

TEST(BadInput, ConflictingFlagsAreRefused) {
  const std::vector<BadFlag> cases{
      {{"--device", "cpu", "--device-index", "1"}, "--device-index"},  // the CPU has only 0
      {{"--hidden", "64", "adam", "--params", "1000"}, "adam"},        // run flags next to adam
      {{"adam", "--hidden", "64"}, "--hidden"},
      {{"--steps", "3", "compare", "a.json", "b.json"}, "compare"},
      {{"compar", "a.json", "b.json"}, "did you mean compare?"},
  };
  for (const auto& c : cases) expect_refused(c.args, c.names);
  expect_no_leftovers();
}

TEST(BadInput, AdamFlagsRefuseBadValues) {
  const std::vector<BadFlag> cases{
      {{"adam", "--params", "0"}, "--params"},
      {{"adam", "--params", "-5"}, "--params"},
      {{"adam", "--params", "1125899906842625"}, "--params"},
      {{"adam", "--threads", "0"}, "--threads"},
      {{"adam", "--repeats", "0"}, "--repeats"},
      {{"adam", "--repeats", "x"}, "--repeats"},
      {{"adam", "--json", "/"}, "--json"},
      {{"adam", "--json", "/nonexistent-zob-dir/a.json"}, "--json"},
      {{"adam", "--bogus"}, "--bogus"},
  };
  for (const auto& c : cases) expect_refused(c.args, c.names);
  expect_no_leftovers();
}

// Flags listed by --help that the tables above do not know (added later): given without their
// value, or a boolean given a value, each must still be a one-line exit 2.
TEST(BadInput, EveryFlagInTheHelpIsRefusedWithoutItsValue) {
  const Result help = run_bench({"--help"});
  ASSERT_EQ(help.rc, 0);
  // "  --hidden N [2048]   hidden size h": one space, then the value's type name in capitals.
  const std::regex option(R"(^\s+(--[a-z][a-z0-9-]*)( ([A-Z]+)\b)?)");
  int checked = 0;
  for (const auto& line : lines_of(help.out)) {
    std::smatch m;
    if (!std::regex_search(line, m, option)) continue;
    const std::string flag = m[1];
    if (flag == "--help" || flag == "--version") continue;
    SCOPED_TRACE(line);
    auto args = small();
    if (m[3].matched) args.push_back(flag);  // takes a value: give none
    else args.push_back(flag + "=zob-garbage");
    expect_refused(args, flag);
    ++checked;
  }
  EXPECT_GE(checked, 16) << help.out;
  expect_no_leftovers();
}

// `compare` (saved results side by side), when this build has the subcommand.
TEST(BadInput, CompareRefusesBadFiles) {
  const Result help = run_bench({"--help"});
  if (help.out.find("compare") == std::string::npos) {
    GTEST_SKIP() << "this build has no compare subcommand (src/compare is covered by "
                    "tests/unit/compare_input_test.cpp)";
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("zob-e2e-compare-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto file = [&dir](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  const std::string good = file("good.json", R"({"schema_version": 1, "workload": {"hidden": 64},
                      "registered": {"step_avg_s": 0.5}, "speedup": null})");
  const std::vector<BadFlag> cases{
      {{"compare", good, (dir / "missing.json").string()}, "missing.json"},
      {{"compare", good, file("text.json", "not json at all")}, "text.json"},
      {{"compare", good, file("array.json", "[1, 2, 3]")}, "array.json"},
      {{"compare", good, file("v2.json", R"({"schema_version": 2, "workload": {}})")}, "v2.json"},
      {{"compare", good, file("huge.json", R"({"schema_version": 1e400, "workload": {}})")},
       "huge.json"},
      {{"compare", good,
        file("noarms.json", R"({"schema_version": 1, "workload": {"hidden": 64}})")},
       "noarms.json"},
      {{"compare", good, file("dup.json", R"({"schema_version": 1, "workload": {"hidden": 64},
                            "registered": {}, "registered": {}})")},
       "dup.json"},
      {{"compare", good}, "compare"},
      {{"compare", "/dev/zero", good}, "is a character device"},
      {{"compare", good, dir.string()}, "is a directory"},
      {{"compare", good, good, "--json", "/nonexistent-zob-dir/c.json"}, "--json"},
  };
  for (const auto& c : cases) expect_refused(c.args, c.names);
  std::filesystem::remove_all(dir);
  expect_no_leftovers();
}

// ------------------------------------------------------------------ hostile names

// The newline inside a hostile name must not start a new line of output: no line begins with
// the text that follows it; and there is exactly one DRIVERRESULT line.
void expect_name_kept_on_one_line(const std::string& text, const std::string& after_newline) {
  int results = 0;
  for (const auto& line : lines_of(text)) {
    EXPECT_NE(line.rfind(after_newline, 0), 0u) << "a name was split over two lines: " << line;
    results += line.rfind("DRIVERRESULT=", 0) == 0 ? 1 : 0;
  }
  if (text.find("DRIVERRESULT=") != std::string::npos) {
    EXPECT_EQ(results, 1) << text;
  }
}

// The hostname has quotes, a backslash, a newline, a control byte and bytes that are not UTF-8;
// stdout must still be the table plus one parseable DRIVERRESULT line, the --json file too.
TEST(HostileNames, HostnameWithQuotesNewlinesAndInvalidUtf8StaysValidJson) {
  const std::string hostile = std::string("h\"o\\s\nt\x01") + "\xff\xfe" + "\xc3(";
  const std::string json_path = (std::filesystem::temp_directory_path() /
                                 ("zob-e2e-host-" + std::to_string(::getpid()) + ".json"))
                                    .string();
  RunOptions o;
  o.before_exec = [&hostile] {
    if (::unshare(CLONE_NEWUTS) != 0) return 96;
    return ::sethostname(hostile.data(), hostile.size()) == 0 ? 0 : 97;
  };
  const Result r = run_bench_with(small({"--json", json_path}), o);
  expect_no_leftovers();
  if (r.rc == 96 || r.rc == 97) {
    GTEST_SKIP() << "no UTS namespace here (unshare/sethostname refused); "
                    "tests/unit/report_test.cpp HostileNamesStayValidJson covers the report";
  }
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_name_kept_on_one_line(r.out, "t\x01");
  const auto j = driver_result(r.out);  // throws (fails) on invalid JSON or UTF-8
  const std::string name = j.at("host").at("hostname");
  const std::string kept = "h\"o\\s\nt\x01";
  EXPECT_EQ(name.substr(0, kept.size()), kept);
  EXPECT_NE(name.find("\xEF\xBF\xBD"), std::string::npos) << "bad bytes not replaced";
  std::ifstream in(json_path);
  EXPECT_EQ(nlohmann::json::parse(in), j);
  std::filesystem::remove(json_path);
}

#ifdef ZOB_FAKE_ZE_DRIVER
// --gpus N on an accelerator is checked by the probe, before any arm: more ranks than devices,
// then (devices shared, test-only) a backend without device collectives. Both exit 2.
TEST(BadInput, GpusAboveTheDeviceCountAndGpusWithoutDeviceCollectivesAreRefused) {
  const Env ze{{"ZE_ENABLE_ALT_DRIVERS", ZOB_FAKE_ZE_DRIVER}};
  const Result count = run_bench(small({"--gpus", "3"}, "xpu"), ze);
  expect_no_leftovers();
  EXPECT_EQ(count.rc, 2) << count.err;
  EXPECT_TRUE(count.out.empty()) << count.out;
  expect_one_error_line(count, "--gpus 3 asks for 3 xpu devices from index 0, but 1 is there");

  Env shared = ze;
  shared.push_back({"ZOB_TEST_SHARE_DEVICE", "1"});
  const Result coll = run_bench(small({"--gpus", "2"}, "xpu"), shared);
  expect_no_leftovers();
  EXPECT_EQ(coll.rc, 2) << coll.err;
  EXPECT_TRUE(coll.out.empty()) << coll.out;
  expect_one_error_line(coll, "--gpus 2 on xpu: --gpus > 1 on the xpu device needs collectives");
}

TEST(HostileNames, DeviceNameWithQuotesNewlinesAndInvalidUtf8StaysValidJson) {
  const std::string hostile = std::string("GPU \"x\"\n\\") + "\xff" + "\xe2\x82" + " end";
  const Result r = run_bench(small({}, "xpu"), {{"ZE_ENABLE_ALT_DRIVERS", ZOB_FAKE_ZE_DRIVER},
                                                {"FAKE_ZE_DEVICE_NAME", hostile}});
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  expect_name_kept_on_one_line(r.out, "\\\xff");
  expect_name_kept_on_one_line(r.err, "\\\xff");
  const auto j = driver_result(r.out);
  for (const char* arm : {"registered", "unregistered"}) {
    const std::string name = j.at(arm).at("device_name");
    const std::string kept = "GPU \"x\"\n\\";
    EXPECT_EQ(name.substr(0, kept.size()), kept) << arm;
    EXPECT_NE(name.find("\xEF\xBF\xBD"), std::string::npos) << arm;
  }
  // The progress line on stderr names the device on one line.
  for (const auto& line : lines_of(r.err)) {
    if (line.find("zero3-offload-bench: device xpu") == 0) {
      EXPECT_NE(line.find("end)"), std::string::npos) << line;
    }
  }
}
#endif

}  // namespace
