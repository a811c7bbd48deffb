#include "report/output_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

#include "zob/errors.hpp"

namespace zob {

namespace {

[[noreturn]] void refuse(const std::string& flag, const std::string& path, const std::string& why,
                         const std::string& fix) {
  throw UsageError(fmt::format("{}{}{}: {}; {}", flag, flag.empty() ? "" : " ", path, why, fix));
}

// /proc/PID/fd (and /proc/PID/task/TID/fd): its entries are the process's open descriptors,
// links that open() follows to the descriptor's pipe, terminal or file even where the link's
// text ("pipe:[123]") names nothing. /dev/fd, /dev/stdout and /proc/self lead here.
bool is_descriptor_folder(const std::string& real_dir) {
  // "/proc/" digits ("/task/" digits)? "/fd"
  std::string_view rest = real_dir;
  auto skip = [&rest](std::string_view word, bool then_digits) {
    if (rest.substr(0, word.size()) != word) return false;
    rest.remove_prefix(word.size());
    if (!then_digits) return true;
    std::size_t n = 0;
    while (n < rest.size() && rest[n] >= '0' && rest[n] <= '9') ++n;
    rest.remove_prefix(n);
    return n > 0;
  };
  if (!skip("/proc/", true)) return false;
  if (rest.substr(0, 6) == "/task/" && !skip("/task/", true)) return false;
  return rest == "/fd";
}

struct Split {
  std::string dir, base;
};

Split split_path(const std::string& p) {
  const auto slash = p.find_last_of('/');
  if (slash == std::string::npos) return {".", p};
  return {slash == 0 ? "/" : p.substr(0, slash), p.substr(slash + 1)};
}

// The folder of `dir` with its symlinks resolved; refuses one that does not exist or is a file.
std::string real_folder(const std::string& dir, const std::string& flag, const std::string& path) {
  char real[PATH_MAX];
  struct stat st {};
  int err = 0;
  if (::realpath(dir.c_str(), real) == nullptr) err = errno;
  // realpath() accepts a file as well: "plain.txt/x.json" is caught by the stat.
  else if (::stat(real, &st) != 0) err = errno;
  else if (!S_ISDIR(st.st_mode)) err = ENOTDIR;
  else return real;
  if (err == ENOENT) {
    refuse(flag, path, "the folder " + dir + " does not exist", "create it or choose another");
  }
  if (err == ENOTDIR) {
    refuse(flag, path, "a file stands where a folder should (" + dir + ")",
           "give a path through folders only");
  }
  refuse(flag, path, fmt::format("cannot reach the folder {} ({})", dir, std::strerror(err)),
         "choose a folder you can write");
}

std::string read_link(const std::string& link, const std::string& flag, const std::string& path) {
  std::string text(PATH_MAX, '\0');
  const ssize_t n = ::readlink(link.c_str(), text.data(), text.size());
  if (n < 0) refuse(flag, path, fmt::format("cannot read the link {}", link), std::strerror(errno));
  text.resize(static_cast<std::size_t>(n));
  return text;
}

}  // namespace

OutputTarget resolve_output_target(const std::string& path, const std::string& flag) {
  if (path.empty()) {
    throw UsageError(flag + " needs a file name; give e.g. " + flag + " result.json");
  }
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    const Split s = split_path(p);
    if (s.base.empty() || s.base == "." || s.base == "..") {
      refuse(flag, path, "is a directory", "give a file name");
    }
    const std::string dir = real_folder(s.dir, flag, path);
    const std::string full = (dir == "/" ? "" : dir) + "/" + s.base;
    const bool descriptors = is_descriptor_folder(dir);
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0) {
      if (errno == ENOENT && descriptors) {
        refuse(flag, path, "no such open descriptor", "open it (e.g. 3>file) or give a file");
      }
      if (errno == ENOENT) return {full, false};
      refuse(flag, path, std::strerror(errno), "choose another file");
    }
    if (S_ISLNK(st.st_mode)) {
      if (descriptors) return {full, true};
      const std::string target = read_link(full, flag, path);
      p = !target.empty() && target.front() == '/' ? target : dir + "/" + target;
      continue;
    }
    if (S_ISDIR(st.st_mode)) refuse(flag, path, "is a directory", "give a file name");
    if (S_ISSOCK(st.st_mode)) {
      refuse(flag, path, "is a socket, which cannot be opened as a file",
             "give a file, a FIFO or a device");
    }
    return {full, !S_ISREG(st.st_mode)};
  }
  refuse(flag, path, "too many levels of symlinks", "point the link at a file");
}

void check_output_path(const std::string& path, const std::string& flag) {
  const OutputTarget t = resolve_output_target(path, flag);
  // access() rather than open(): opening a FIFO would block, or hand its reader an early end.
  struct stat st {};
  const bool exists = ::stat(t.path.c_str(), &st) == 0;
  if (exists && ::access(t.path.c_str(), W_OK) != 0) {
    refuse(flag, path, fmt::format("cannot be written ({})", std::strerror(errno)),
           "make it writable or choose another file");
  }
  if (t.in_place) return;
  // The write makes a temporary file beside the target: try that here (root is refused too,
  // on a read-only file system). mkstemp's unique names keep the ranks of an MPI launch,
  // which all check the same path at once, out of each other's way.
  std::string probe = split_path(t.path).dir + "/.zob-check.XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    refuse(flag, path,
           fmt::format("no file can be created in {} ({})", split_path(t.path).dir,
                       std::strerror(errno)),
           "choose a writable folder");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace {

// Writes all of `text`; returns 0 or errno.
int write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

// A FIFO or pipe whose reader has gone must fail this write (EPIPE, one error line), not end
// the process with SIGPIPE before the rest of the report: SIGPIPE is held off meanwhile, and
// one it raised is taken back.
int write_in_place(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return errno;
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  int err = write_all(fd, text);
  if (err == EPIPE) {
    const timespec now{0, 0};
    while (::sigtimedwait(&pipe_only, nullptr, &now) == SIGPIPE) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

int write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return errno;
  int err = write_all(fd, text);
  if (err == 0 && ::fchmod(fd, 0644) != 0) err = errno;
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) ::unlink(tmp.c_str());
  return err;
}

}  // namespace

void write_output_file(const std::string& path, const std::string& text) {
  const OutputTarget t = resolve_output_target(path, "");
  const int err = t.in_place ? write_in_place(t.path, text) : write_atomically(t.path, text);
  if (err != 0) {
    refuse("", path, fmt::format("cannot be written ({})", std::strerror(err)),
           "check free space and permissions");
  }
}

}  // namespace zob
