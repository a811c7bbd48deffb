// Test hooks of the fake driver.
//
// FAKE_ZE_LEAK_REPORT=PATH: when the process that loaded the fake driver exits normally, one
// line is appended to PATH with everything the driver handed out and never got back:
//   pid=1234 allocs=0 alloc_bytes=0 imports=0 import_bytes=0 contexts=0 command_lists=0 ...
// The e2e fault tests read it to prove that a failed arm released every device allocation,
// import and handle before exiting (a crashed process writes nothing, which they also check).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fake_state.hpp"

namespace fake_ze {

constinit Live g_live;

bool faults_apply() {
  const char* want = std::getenv("FAKE_ZE_FAULT_CMDLINE");
  if (want == nullptr || want[0] == '\0') return true;
  std::FILE* f = std::fopen("/proc/self/cmdline", "rb");
  if (f == nullptr) return false;
  std::string cmd;
  for (int c; (c = std::fgetc(f)) != EOF;) cmd += c == '\0' ? ' ' : static_cast<char>(c);
  std::fclose(f);
  return cmd.find(want) != std::string::npos;
}

namespace {

struct LeakReport {
  ~LeakReport() {
    const char* path = std::getenv("FAKE_ZE_LEAK_REPORT");
    if (path == nullptr || path[0] == '\0') return;
    char line[512];
    const int n = std::snprintf(
        line, sizeof line,
        "pid=%d allocs=%ld alloc_bytes=%llu imports=%ld import_bytes=%llu contexts=%ld "
        "command_lists=%ld event_pools=%ld events=%ld modules=%ld kernels=%ld\n",
        static_cast<int>(::getpid()), g_live.allocs.load(), g_live.alloc_bytes.load(),
        g_live.imports.load(), g_live.import_bytes.load(), g_live.contexts.load(),
        g_live.command_lists.load(), g_live.event_pools.load(), g_live.events.load(),
        g_live.modules.load(), g_live.kernels.load());
    // O_APPEND: the probe and every arm child write to the same file; one write() per line.
    const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || n <= 0) return;
    [[maybe_unused]] const ssize_t w = ::write(fd, line, static_cast<std::size_t>(n));
    ::close(fd);
  }
} g_leak_report;

}  // namespace
}  // namespace fake_ze
