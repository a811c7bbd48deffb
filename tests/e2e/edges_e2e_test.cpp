// Issue 37, "trust at the edges", through the real binary: output files that are devices,
// FIFOs, descriptors or symlinks; output paths refused before any arm starts; compare and
// plot reading regular files only, within a size bound; a flag given twice (the last wins);
// a mistyped subcommand. SIGHUP is with the other signals (E2ESignal in e2e_test.cpp).
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;
namespace fs = std::filesystem;

// A fresh folder per test, removed at the end.
class Edges : public FreshDirTest {
 protected:
  Edges() : FreshDirTest("zob-edges-") {}
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return path(name);
  }
};

// Reads everything from `fd` on a thread of its own (the benchmark may fill a pipe's buffer).
class Reader {
 public:
  explicit Reader(int fd)
      : thread_([this, fd] {
          char buf[4096];
          for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
            if (n > 0) text_.append(buf, static_cast<std::size_t>(n));
            else if (errno != EINTR) break;
          }
          ::close(fd);
        }) {}
  std::string join() {
    thread_.join();
    return text_;
  }

 private:
  std::string text_;
  std::thread thread_;
};

// ------------------------------------------------------------------ where output goes

TEST_F(Edges, JsonAndCsvToDevNullLeaveItACharacterDevice) {
  const Result r = run_bench(small({"--json", "/dev/null", "--csv", "/dev/null"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  EXPECT_EQ(read_text("/dev/null"), "");
}

TEST_F(Edges, JsonThroughASymlinkWritesItsTargetAndKeepsTheLink) {
  // One link to a file that exists, one to a name that does not yet (in another folder).
  fs::create_directories(dir_ / "real");
  const std::string old_target = file("real/old.json", "old\n");
  fs::create_symlink("real/old.json", dir_ / "old-link.json");
  fs::create_symlink(dir_ / "real" / "new.json", dir_ / "new-link.json");
  const Result r =
      run_bench(small({"--json", path("old-link.json"), "--trace", path("new-link.json")}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(dir_ / "old-link.json"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "new-link.json"));
  EXPECT_EQ(nlohmann::json::parse(read_text(old_target)), driver_result(r.out));
  EXPECT_TRUE(nlohmann::json::parse(read_text(path("real/new.json"))).contains("traceEvents"));
  // Nothing else was left in either folder (no temporary files).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "real"), {}), 2);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 3);
}

TEST_F(Edges, JsonToAFifoReachesItsReader) {
  const std::string fifo = path("result.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&fifo, &got] { got = read_text(fifo); });  // blocks until a writer
  const Result r = run_bench(small({"--json", fifo}));
  if (got.empty()) {
    // A run that never opened the FIFO: let the reader go (it sees an empty document).
    const int unblock = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (unblock >= 0) ::close(unblock);
  }
  reader.join();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::is_fifo(fifo)) << "the FIFO was replaced";
  EXPECT_EQ(nlohmann::json::parse(got), driver_result(r.out));
}

TEST_F(Edges, JsonToAnOpenDescriptorIsWrittenInPlace) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Reader reader(fds[0]);
  const int write_end = fds[1];
  const Result r = run_bench(small({"--json", "/dev/fd/5"}), {}, nullptr, 60, [write_end] {
    // dup2 onto itself keeps O_CLOEXEC: clear it either way.
    ::dup2(write_end, 5);
    ::fcntl(5, F_SETFD, 0);
  });
  ::close(write_end);
  const std::string got = reader.join();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(got), driver_result(r.out));
}

// Refused with exit 2 and one line before anything starts (the one line is the whole of
// stderr: no device probe, no arm, no step). These hold as root too: no permission bit is
// involved.
TEST_F(Edges, OutputPathsThatCannotBeWrittenAreRefusedBeforeAnyArm) {
  const std::string a_file = file("plain.txt", "x");
  fs::create_directories(dir_ / "folder");
  const std::string sock = path("s.sock");
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << sock;
  fs::create_symlink("loop-b", dir_ / "loop-a");
  fs::create_symlink("loop-a", dir_ / "loop-b");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--json", a_file + "/x.json"}, "a file stands where a folder should"},
      {{"--json", path("folder")}, "is a directory"},
      {{"--csv", path("folder") + "/"}, "is a directory"},
      {{"--trace", path("missing/t.json")}, "does not exist"},
      {{"--json", sock}, "is a socket"},
      {{"--json", path("loop-a")}, "symlinks"},
      {{"--json", "/dev/fd/97"}, "no such open descriptor"},
  };
  for (const auto& [extra, why] : cases) {
    SCOPED_TRACE(extra[1]);
    const Result r = run_bench(small(extra));
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    expect_one_error_line(r, extra[0] + " " + extra[1] + ": ");
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
  ::close(s);
}

// Permission bits stop everyone but root: this one runs where they do.
TEST_F(Edges, AFolderWithoutWritePermissionIsRefusedBeforeAnyArm) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes through permission bits";
  fs::create_directories(dir_ / "ro");
  fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  const Result r = run_bench(small({"--json", path("ro/x.json")}));
  fs::permissions(dir_ / "ro", fs::perms::owner_all);
  EXPECT_EQ(r.rc, 2) << r.err;
  expect_one_error_line(r, "no file can be created in");
}

// ------------------------------------------------------------------ compare and plot inputs

TEST_F(Edges, CompareAndPlotReadRegularFilesOnlyWithinABound) {
  const std::string good = file("good.json", R"({"schema_version": 1, "workload": {"hidden": 64},
                      "registered": {"step_avg_s": 0.5}, "speedup": null})");
  const std::string fifo = path("in.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Sparse: 300 MiB of size, no blocks; refused from its size, never read.
  const std::string huge = path("huge.json");
  ASSERT_EQ(::truncate(file("huge.json", "").c_str(), 300LL << 20), 0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"compare", "/dev/zero", good}, "'/dev/zero' is a character device"},
      {{"compare", good, fifo}, "is a FIFO"},
      {{"compare", good, dir_.string()}, "is a directory"},
      {{"compare", good, huge}, "larger than 256 MiB"},
      {{"plot", "/dev/zero", "--out", path("c.svg")}, "plot: '/dev/zero' is a character device"},
      {{"plot", fifo, "--out", path("c.svg")}, "is a FIFO"},
  };
  for (const auto& [args, why] : cases) {
    SCOPED_TRACE(testing::PrintToString(args));
    RunOptions o;
    o.limit_s = 20;  // a FIFO that blocked the open, or /dev/zero read whole, fails here
    const Result r = run_bench_with(args, o);
    EXPECT_EQ(r.rc, 2) << r.err;
    expect_one_error_line(r, why);
  }
}

// ------------------------------------------------------------------ the command line

TEST_F(Edges, AFlagGivenTwiceTakesItsLastValue) {
  auto args = small(
      {"--hidden", "128", "--arms", "registered,unregistered", "--arms", "pageable,registered"});
  const Result r = run_bench(args);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at("workload").at("hidden"), 128);  // small() gave --hidden 64 first
  EXPECT_TRUE(j.contains("pageable")) << j.dump();
  EXPECT_FALSE(j.contains("unregistered")) << "the first --arms list was kept";
}

TEST_F(Edges, AMistypedSubcommandIsNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"compar", "a.json", "b.json"}, "unknown subcommand compar; did you mean compare?"},
      {{"plto", "a.json", "--out", "c.svg"}, "unknown subcommand plto; did you mean plot?"},
      {{"--seed", "7", "adma"}, "unknown subcommand adma; did you mean adam?"},
  };
  for (const auto& [args, why] : cases) {
    SCOPED_TRACE(testing::PrintToString(args));
    const Result r = run_bench(args);
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    expect_one_error_line(r, why);
  }
}

// /proc/meminfo's field in bytes (0 when absent).
std::uint64_t meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  std::uint64_t kb = 0;
  while (in >> name >> kb >> unit) {
    if (name == field + ":") return kb * 1024;
  }
  return 0;
}

// The dry run's plan of `layers` (its --json): host bytes of the node and the device peak.
struct PlannedBytes {
  int rc = -1;
  double host = 0, device = 0;
  std::string err;
};
PlannedBytes plan_of(std::vector<std::string> args, const std::string& json) {
  args.insert(args.end(), {"--dry-run", "--json", json});
  const Result r = run_bench(args);
  PlannedBytes p{r.rc, 0, 0, r.err};
  std::ifstream in(json);
  if (!in) return p;
  const auto plan = nlohmann::json::parse(in).at("plan");
  p.host = plan.at("host_node_bytes").get<double>();
  p.device = plan.at("device_bytes").get<double>();
  return p;
}

// The CPU device's memory is the host's RAM, so the pre-flight checks host plus device together
// (a run it passed on a 24.7 GB box was OOM-killed: results/cpu/2026-12-07-cpu-device-memory).
// A model sized to this machine (from two dry runs: both figures grow with --layers) whose host
// bytes fit MemAvailable and whose device peak fits the device, but not both: exit 2, one line
// naming both parts, no arm started; a small model fits, and its dry run says what it checked.
TEST_F(Edges, PreflightAddsTheCpuDevicesMemoryToTheHostCheck) {
  const auto model = [](int layers) {
    return std::vector<std::string>{"--device",   "cpu",
                                    "--schedule", "deepspeed",
                                    "--hidden",   "1024",
                                    "--vocab",    "4096",
                                    "--seq",      "512",
                                    "--batch",    "8",
                                    "--layers",   std::to_string(layers)};
  };
  const PlannedBytes small = plan_of(model(4), path("4.json"));
  const PlannedBytes big = plan_of(model(40), path("40.json"));
  ASSERT_GT(big.host, small.host) << small.err << big.err;
  ASSERT_GT(big.device, small.device);
  const Result fits = run_bench([&] {
    auto a = model(4);
    a.push_back("--dry-run");
    return a;
  }());
  EXPECT_EQ(fits.rc, 0) << fits.err;
  EXPECT_NE(fits.out.find("the cpu device's memory is the host's RAM: host + device peak"),
            std::string::npos)
      << fits.out;
  // host + device / 2 = MemAvailable: each margin is half the device peak.
  const double available = static_cast<double>(meminfo_bytes("MemAvailable"));
  const double per_layer = (big.host - small.host + (big.device - small.device) / 2) / 36;
  const double at_4 = small.host + small.device / 2;
  const int layers = 4 + static_cast<int>((available - at_4) / per_layer);
  ASSERT_GT(layers, 4) << "MemAvailable " << available;
  const PlannedBytes edge = plan_of(model(layers), path("edge.json"));
  EXPECT_EQ(edge.rc, 2) << edge.err;
  EXPECT_LT(edge.host, available) << "the host bytes alone should fit";
  EXPECT_GT(edge.host + edge.device, available);
  const Result refused = run_bench([&] {
    auto a = model(layers);
    a.insert(a.end(), {"--steps", "1", "--warmup", "0"});
    return a;
  }());
  EXPECT_EQ(refused.rc, 2) << refused.err;
  EXPECT_TRUE(refused.out.empty()) << refused.out;
  expect_one_error_line(refused, "of device memory at its planned peak, the same RAM");
  EXPECT_EQ(refused.err.find("starting"), std::string::npos) << "an arm ran: " << refused.err;
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
