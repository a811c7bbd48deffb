#include "driver/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "driver/driver.hpp"

extern char** environ;

namespace zob {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_stop_count = 0;
volatile sig_atomic_t g_child_pgid = 0;  // the running child's group; 0 when none
bool g_hup_handled = false;              // SIGHUP runs on_signal (it was not ignored)
int g_wake_read = -1;
int g_wake_write = -1;

void on_signal(int sig) {
  const int saved = errno;
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
    if (g_stop_signal == 0) g_stop_signal = sig;
    g_stop_count = g_stop_count + 1;
    // The second Ctrl-C means "now": no grace period for the child.
    if (g_stop_count >= 2 && g_child_pgid > 0) ::kill(-g_child_pgid, SIGKILL);
  }
  if (g_wake_write >= 0) {
    const char b = 0;
    [[maybe_unused]] const ssize_t n = ::write(g_wake_write, &b, 1);
  }
  errno = saved;
}

void drain_wake_pipe() {
  char buf[64];
  while (::read(g_wake_read, buf, sizeof buf) > 0) {
  }
}

// Grace the child gets after a forwarded SIGINT / SIGTERM before SIGKILL.
constexpr double kStopGraceS = 5.0;

double seconds_until(Clock::time_point t) {
  return std::chrono::duration<double>(t - Clock::now()).count();
}

[[noreturn]] void child_after_fork(const std::vector<char*>& argv, int result_write, pid_t parent,
                                   const sigset_t& old_mask) {
  // Only async-signal-safe calls from here to execv.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died between fork() and prctl(): then no signal would ever come.
  if (::getppid() != parent) ::_exit(127);
  if (result_write == kChildResultFd) {
    ::fcntl(result_write, F_SETFD, 0);
  } else if (::dup2(result_write, kChildResultFd) < 0) {
    ::_exit(127);
  }
  // stdout carries the table and DRIVERRESULT: anything a child prints goes to stderr.
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  if (g_hup_handled) ::signal(SIGHUP, SIG_DFL);  // an ignored SIGHUP (nohup) stays ignored
  ::signal(SIGCHLD, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::execv("/proc/self/exe", argv.data());
  const char msg[] = "zero3-offload-bench: error: cannot exec /proc/self/exe for a child\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  ::_exit(127);
}

}  // namespace

void install_driver_signal_handlers() {
  if (g_wake_read < 0) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      throw std::system_error(errno, std::generic_category(), "pipe2 for the signal wake-up");
    }
    g_wake_read = fds[0];
    g_wake_write = fds[1];
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  // A closed terminal or ssh session (SIGHUP) stops the run as SIGTERM does: the report of
  // what finished is still printed. Under nohup (SIGHUP ignored) the run keeps going, as the
  // user asked.
  struct sigaction hup {};
  ::sigaction(SIGHUP, nullptr, &hup);
  g_hup_handled = hup.sa_handler != SIG_IGN;
  if (g_hup_handled) ::sigaction(SIGHUP, &sa, nullptr);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &sa, nullptr);
}

void restore_default_signal_handlers() {
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  if (g_hup_handled) ::signal(SIGHUP, SIG_DFL);
  g_hup_handled = false;
  ::signal(SIGCHLD, SIG_DFL);
}

int stop_signal() { return g_stop_signal; }

namespace {

// Forks and execs the child (process group of its own, result pipe as fd 3). Returns its
// pid; *result_fd receives the non-blocking read end of its result pipe.
pid_t spawn_child(const std::vector<std::string>& args, int* result_fd) {
  std::vector<std::string> owned{"zero3-offload-bench"};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe2 for a child's result");
  }
  // Block the stop signals across fork so the child cannot run our handler before exec.
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  sigaddset(&block, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &block, &old_mask);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) child_after_fork(argv, pipe_fds[1], parent, old_mask);
  const int fork_errno = errno;
  if (pid > 0) {
    ::setpgid(pid, pid);  // also here: whichever of the two runs first, the group exists
    g_child_pgid = pid;
  }
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::close(pipe_fds[1]);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    throw std::system_error(fork_errno, std::generic_category(), "fork for an arm's child");
  }
  *result_fd = pipe_fds[0];
  ::fcntl(*result_fd, F_SETFL, O_NONBLOCK);
  return pid;
}

// Reads the child's result until it is a zombie, forwarding a stop signal (then SIGKILL
// after the grace, or at a second signal) and killing it at the deadline.
void watch_child(pid_t pid, int result_fd, double timeout_s, ChildOutcome& out) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  Clock::time_point grace_deadline{};
  bool forwarded = false, killed = false, eof = false;
  while (true) {
    // WNOWAIT: the zombie keeps the process group id reserved while we clean the group.
    siginfo_t info{};
    const bool dead =
        ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid;
    if (!eof) eof = !read_available(result_fd, out.output);
    if (dead) return;  // whatever is left in the pipe was read just above

    const int stop = g_stop_signal;
    if (stop != 0 && !forwarded) {
      ::kill(-pid, stop);
      forwarded = true;
      out.stopped_by = stop;
      grace_deadline = Clock::now() + std::chrono::seconds(static_cast<int>(kStopGraceS));
    }
    if (!killed && forwarded && (g_stop_count >= 2 || Clock::now() >= grace_deadline)) {
      ::kill(-pid, SIGKILL);
      killed = true;
    }
    if (!killed && timeout_s > 0 && Clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      killed = true;
      out.timed_out = true;
    }
    // SIGCHLD and the stop signals wake the poll through the self-pipe; the cap is only a
    // safety net against a lost wake-up.
    double wait_s = 0.25;
    if (timeout_s > 0 && !killed) wait_s = std::min(wait_s, std::max(0.0, seconds_until(deadline)));
    if (forwarded && !killed)
      wait_s = std::min(wait_s, std::max(0.0, seconds_until(grace_deadline)));
    pollfd fds[2] = {{g_wake_read, POLLIN, 0}, {result_fd, POLLIN, 0}};
    const int nfds = eof ? 1 : 2;
    const int r = ::poll(fds, static_cast<nfds_t>(nfds), static_cast<int>(wait_s * 1000) + 1);
    if (r < 0 && errno != EINTR) return;
    drain_wake_pipe();
  }
}

}  // namespace

ChildOutcome run_child(const std::vector<std::string>& args, double timeout_s) {
  int result_fd = -1;
  const pid_t pid = spawn_child(args, &result_fd);
  ChildOutcome out;
  out.pid = pid;
  watch_child(pid, result_fd, timeout_s, out);

  // The child is a zombie now (or poll failed): clear anything it left in its group, then reap.
  g_child_pgid = 0;
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(result_fd);
  if (WIFEXITED(status)) {
    out.exited = true;
    out.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.term_signal = WTERMSIG(status);
  }
  if (out.stopped_by == 0 && g_stop_signal != 0 && !out.exited) out.stopped_by = g_stop_signal;
  return out;
}

bool read_available(int fd, std::string& out) {
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;  // other errors: treat as end
  }
}

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace zob
