// Child processes of the driver: spawn in an own process group, wait with a deadline while
// collecting the child's result pipe, forward SIGINT / SIGTERM / SIGHUP, reap on every path.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "zob/clock.hpp"
#include "zob/text.hpp"  // one_line, used with every child's error

namespace zob {

// SIGINT / SIGTERM / SIGHUP / SIGCHLD handlers that wake the wait loop through a self-pipe.
// The first stop signal (SIGINT, SIGTERM or SIGHUP; SIGHUP only when not ignored, as under
// nohup) is forwarded to the running child's group by the wait loop; a second one SIGKILLs the
// group from the handler itself.
void install_driver_signal_handlers();
void restore_default_signal_handlers();
// 0, or the first SIGINT / SIGTERM / SIGHUP received.
int stop_signal();

struct ChildOutcome {
  pid_t pid = 0;
  std::string output;   // everything the child wrote to its result fd
  bool exited = false;  // WIFEXITED
  int exit_code = 0;
  int term_signal = 0;     // set when killed by a signal
  bool timed_out = false;  // we killed it at the deadline
  int stopped_by = 0;      // the stop signal that ended the wait (forwarded to the child)
};

// Runs `<this executable> args...` with its stdout sent to stderr (stdout is the report's)
// and a pipe as fd 3, waits for it (timeout_s <= 0: no limit) and reaps it. Throws
// std::system_error when the process cannot be started.
ChildOutcome run_child(const std::vector<std::string>& args, double timeout_s);

// Appends what the non-blocking fd holds to out; false at end of file (or on an error).
bool read_available(int fd, std::string& out);
// Writes all of text to fd (a result pipe), retrying on EINTR; stops quietly when the reader
// is gone (the reader then reports "no result").
void write_all(int fd, const std::string& text);

}  // namespace zob
