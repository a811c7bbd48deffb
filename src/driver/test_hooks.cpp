#include "driver/test_hooks.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "driver/fault_device.hpp"
#include "driver/process.hpp"
#include "zob/host_memory.hpp"

namespace zob::test_hooks {

namespace {

// The hooks' variables, as this process found them at the first call.
struct Settings {
  std::string child_fault;     // ZOB_TEST_CHILD_FAULT
  std::string rank_fault;      // ZOB_TEST_RANK_FAULT
  std::string mpi_rank_fault;  // ZOB_TEST_MPI_RANK_FAULT
  std::string device_fault;    // ZOB_TEST_DEVICE_FAULT
  std::string device_shared;   // ZOB_TEST_DEVICE_SHARED
  std::string registration;    // ZOB_TEST_REGISTRATION
  bool share_device = false;   // ZOB_TEST_SHARE_DEVICE=1
};

const Settings& settings() {
  static const Settings read = [] {
    const auto text = [](const char* name) {
      const char* v = std::getenv(name);
      return v == nullptr ? std::string() : std::string(v);
    };
    Settings s;
    s.child_fault = text("ZOB_TEST_CHILD_FAULT");
    s.rank_fault = text("ZOB_TEST_RANK_FAULT");
    s.mpi_rank_fault = text("ZOB_TEST_MPI_RANK_FAULT");
    s.device_fault = text("ZOB_TEST_DEVICE_FAULT");
    s.device_shared = text("ZOB_TEST_DEVICE_SHARED");
    s.registration = text("ZOB_TEST_REGISTRATION");
    s.share_device = text("ZOB_TEST_SHARE_DEVICE") == "1";
    return s;
  }();
  return read;
}

// The kind of ZOB_TEST_CHILD_FAULT when it names `arm`, else nullopt.
std::optional<std::string> child_fault_kind(Arm arm) {
  const std::string& s = settings().child_fault;
  const auto colon = s.find(':');
  if (colon == std::string::npos || s.substr(0, colon) != to_string(arm)) return std::nullopt;
  return s.substr(colon + 1);
}

// The kind of ZOB_TEST_REGISTRATION (skip, register) when it names `arm`, else "".
std::string registration_fault(Arm arm) {
  const std::string& s = settings().registration;
  const auto colon = s.find(':');
  if (colon == std::string::npos || s.substr(0, colon) != to_string(arm)) return "";
  return s.substr(colon + 1);
}

[[noreturn]] void hang() {
  while (true) ::pause();
}

// Fails in its way at the at-th collective call; otherwise the inner communicator's.
class FaultCollectives final : public Collectives {
 public:
  FaultCollectives(Collectives& inner, std::string kind, int at)
      : inner_(inner), kind_(std::move(kind)), at_(at) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_gather(const void* s, void* f, std::size_t b) override {
    tick();
    inner_.all_gather(s, f, b);
  }
  void reduce_scatter(const void* in, ElemType t, float* out, std::size_t n) override {
    tick();
    inner_.reduce_scatter(in, t, out, n);
  }
  void broadcast(void* d, std::size_t b, int root) override {
    tick();
    inner_.broadcast(d, b, root);
  }
  void barrier() override {
    tick();
    inner_.barrier();
  }
  void check_peers() override { inner_.check_peers(); }
  void abort(const std::string& reason) noexcept override { inner_.abort(reason); }

 private:
  void tick() {
    if (++calls_ != at_) return;
    std::fprintf(stderr, "zero3-offload-bench: test fault: rank %d: %s\n", rank(), kind_.c_str());
    if (kind_ == "segv") {
      ::signal(SIGSEGV, SIG_DFL);
      ::raise(SIGSEGV);
    } else if (kind_ == "kill") {
      ::raise(SIGKILL);  // kill -9 from outside: no handler, no last word to the peers
    } else if (kind_ == "exit") {
      ::_exit(7);
    } else if (kind_ == "hang") {
      hang();
    } else if (kind_ == "throw") {
      throw std::runtime_error("test fault (ZOB_TEST_MPI_RANK_FAULT) in a collective");
    }
  }
  Collectives& inner_;
  std::string kind_;
  int at_;
  int calls_ = 0;
};

}  // namespace

void apply_child_fault(Arm arm, int fd) {
  const std::optional<std::string> named = child_fault_kind(arm);
  if (!named) return;
  const std::string& kind = *named;
  if (kind == "segv") {
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  } else if (kind == "hang") {
    hang();
  } else if (kind == "ignore_sigint") {
    // A child stuck where it cannot be interrupted: the parent's grace -> SIGKILL path.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_IGN);
    hang();
  } else if (kind == "exit") {
    ::_exit(7);
  } else if (kind == "garbage") {
    write_all(fd, "{\"arm\": \"" + std::string(to_string(arm)) + "\", \"ok\": tru");
    ::_exit(0);
  } else if (kind == "noresult") {
    ::_exit(0);
  } else if (kind == "perturb" || kind == "probe_low" || kind == "slow") {
    return;  // applied to the result, see perturb_result
  } else if (kind == "memlock_taken") {
    // The parent's pre-flight has passed; what this child may lock shrinks now, as when
    // another process locked memory in between (a test drops CAP_IPC_LOCK, so the limit holds).
    const rlimit one_mib{1 << 20, 1 << 20};
    if (::setrlimit(RLIMIT_MEMLOCK, &one_mib) == 0) return;
  }
  std::fprintf(stderr, "zero3-offload-bench: notice: ignoring ZOB_TEST_CHILD_FAULT kind '%s'\n",
               kind.c_str());
}

void perturb_result(ArmResult& r) {
  const std::optional<std::string> kind = child_fault_kind(r.arm);
  const auto i = static_cast<std::size_t>(std::max(r.warmup, 0));
  if (!kind || !r.ok || i >= r.samples.size()) return;
  if (*kind == "probe_low") {  // the physical bound again, from a probe 1000 times too slow
    std::vector<double> wall;
    for (std::size_t s = i; s < r.samples.size(); ++s) wall.push_back(r.samples[s].wall_s);
    std::sort(wall.begin(), wall.end());
    r.bound.probe_gb_per_s /= 1000;
    r.bound.host_gb_per_s = r.bound.probe_gb_per_s;
    r.bound.finish_physical(wall[wall.size() / 2], wall.front());
    return;
  }
  if (*kind == "slow") {
    // every step ten times as long, as an arm on a much slower link: a margin that a loaded
    // 2-core CI machine's noise on millisecond CPU steps (a round 3x slower at -j2) cannot hide
    constexpr double kSlower = 10;
    for (StepSample& s : r.samples) s.wall_s *= kSlower;
    r.step_avg_s *= kSlower;
    r.step_min_s *= kSlower;
    return;
  }
  if (*kind != "perturb") return;
  r.samples[i].loss = std::nextafter(r.samples[i].loss, std::numeric_limits<float>::infinity());
}

std::unique_ptr<Collectives> rank_fault_collectives(Collectives& host, Arm arm, int rank) {
  const std::string& spec = settings().rank_fault;
  char arm_name[32] = {}, kind[16] = {};
  int r = -1, at = 5;
  if (spec.empty() ||
      std::sscanf(spec.c_str(), "%31[^:]:%d:%15[^:]:%d", arm_name, &r, kind, &at) < 3) {
    return nullptr;
  }
  if (std::string(arm_name) != to_string(arm) || r != rank) return nullptr;
  return std::make_unique<FaultCollectives>(host, kind, at);
}

void apply_mpi_rank_fault(int rank) {
  const std::string& spec = settings().mpi_rank_fault;
  int r = -1, at = 0;
  char kind[16] = {};
  if (spec.empty() || std::sscanf(spec.c_str(), "%d:%15[^:]:%d", &r, kind, &at) != 2 || r != rank) {
    return;
  }
  if (std::string(kind) == "throw") {
    throw std::runtime_error("test fault (ZOB_TEST_MPI_RANK_FAULT)");
  }
  if (std::string(kind) == "hang") hang();
}

std::unique_ptr<Device> fault_device(std::unique_ptr<Device> device, Arm arm) {
  char arm_name[32] = {}, op[64] = {};
  long at = 0;
  const std::string& fault = settings().device_fault;
  if (fault.empty() || std::sscanf(fault.c_str(), "%31[^:]:%63[^:]:%ld", arm_name, op, &at) != 3 ||
      at < 1 || std::string(arm_name) != to_string(arm)) {
    op[0] = '\0';
  }
  // ZOB_TEST_DEVICE_SHARED wraps every arm's device (so all report a free memory to compare);
  // only the named arm's sees the other process.
  const std::string& shared = settings().device_shared;
  FaultDevice::Shared seen;
  char shared_arm[32] = {};
  int others = -1;
  unsigned long long taken = 0;
  const bool sharing = !shared.empty() && std::sscanf(shared.c_str(), "%31[^:]:%d:%llu", shared_arm,
                                                      &others, &taken) >= 2;
  if (sharing && std::string(shared_arm) == to_string(arm)) seen = {others, taken};
  const std::string registration = registration_fault(arm);
  // "register" acts in the host memory layer: locked buffers are made there, without the device.
  if (registration == "register") register_locked_buffers_for_test();
  if (op[0] == '\0' && !sharing && registration != "skip") return device;
  auto wrapped = std::make_unique<FaultDevice>(std::move(device), op, at, seen);
  if (registration == "skip") wrapped->skip_registration();
  return wrapped;
}

std::uint64_t probe_free_bytes(std::uint64_t real) {
  unsigned long long taken = 0;
  int others = 0;
  if (std::sscanf(settings().device_shared.c_str(), "probe:%d:%llu", &others, &taken) != 2) {
    return real;
  }
  const std::uint64_t free = real > 0 ? real : FaultDevice::kKnownFree;
  return free - std::min<std::uint64_t>(free, taken);
}

std::unique_ptr<Collectives> mpi_rank_fault_collectives(Collectives& comm, int rank) {
  const std::string& spec = settings().mpi_rank_fault;
  int r = -1, at = 0;
  char kind[16] = {};
  if (spec.empty() || std::sscanf(spec.c_str(), "%d:%15[^:]:%d", &r, kind, &at) != 3 || r != rank ||
      at < 1) {
    return nullptr;
  }
  return std::make_unique<FaultCollectives>(comm, kind, at);
}

bool ranks_share_device() { return settings().share_device; }

}  // namespace zob::test_hooks
