// The files a run writes (--json, --csv, --trace, --plot, compare --json, adam --json, plot
// --out): where a path leads, the check before anything runs, and the write itself.
// docs/output.md "Where output files go" says the same for users.
#pragma once
#include <string>

namespace zob {

struct OutputTarget {
  std::string path;       // what is written: `path`, or the end of its symlinks
  bool in_place = false;  // a device, a FIFO or a descriptor (/dev/fd/N): opened as it is
};

// Follows the symlinks of `path` (the links are kept; their end is written). A regular file,
// or a name that does not exist yet, is replaced atomically; a character device, a FIFO or
// an open descriptor (/dev/fd/N, /dev/stdout, /proc/PID/fd/N) is written in place. Throws
// UsageError "<flag> <path>: <why>; <fix>" for a directory, a socket, a missing folder or a
// symlink loop (`flag` may be empty).
OutputTarget resolve_output_target(const std::string& path, const std::string& flag);

// Before anything runs: the run will be able to write `path` as write_output_file does (a
// temporary file can be made beside a regular target; an in-place target is writable),
// without opening an in-place target (a FIFO's reader would see its end). Throws UsageError.
void check_output_path(const std::string& path, const std::string& flag);

// Writes `text` to what `path` leads to: a regular target through a temporary file beside it
// and rename() (readers never see half a file), an in-place one with O_APPEND (a descriptor's
// file keeps what was written before). Throws UsageError naming the path and errno.
void write_output_file(const std::string& path, const std::string& text);

}  // namespace zob
