#include "zob/compare.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "zob/errors.hpp"

namespace zob {
namespace {

// The arms' names (to_string(Arm), zob/config.hpp), spelled here so that this reader of saved
// files stands alone (the fuzz target result_document builds it by itself).
const char* const kArmNames[] = {"registered", "unregistered", "pageable", "hostalloc"};

constexpr int kSchemaVersion = 1;

// A saved result is a few MB at most (a sweep of hundreds of configurations); a bound keeps a
// wrong argument (/dev/zero, a disk image) from taking all memory before the parse refuses it.
constexpr long long kMaxResultBytes = 256LL << 20;

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void refuse_kind(const std::string& path, mode_t mode) {
  throw UsageError(fmt::format(
      "compare: '{}' is {}; give a saved result file (--json FILE, or stdout saved to a file)",
      path, kind_of(mode)));
}

[[noreturn]] void refuse_size(const std::string& path) {
  throw UsageError(fmt::format(
      "compare: '{}' is larger than {} MiB, more than any saved result; give the --json file or "
      "the saved stdout of a run",
      path, kMaxResultBytes >> 20));
}

// Regular files only, checked before the open (a FIFO would wait for a writer, a device could
// act on the open) and again on the descriptor (the path may have changed in between).
std::string read_whole(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) refuse_kind(path, st.st_mode);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    throw UsageError(
        fmt::format("compare: cannot read '{}' ({}); check the path", path, std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) refuse_kind(path, st.st_mode);
  if (st.st_size > kMaxResultBytes) refuse_size(path);
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw UsageError(fmt::format("compare: cannot read '{}' ({}); check the file", path,
                                   std::strerror(errno)));
    }
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    // The file may grow after the fstat: the bound holds for what is read.
    if (static_cast<long long>(text.size()) > kMaxResultBytes) refuse_size(path);
  }
}

double number_or(const nlohmann::json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string label_of(const nlohmann::json& doc, const std::string& path) {
  std::string backend;
  if (doc.contains("environment") && doc["environment"].is_object() &&
      doc["environment"].contains("device") && doc["environment"]["device"].is_object()) {
    const auto& d = doc["environment"]["device"];
    if (d.contains("backend") && d["backend"].is_string())
      backend = d["backend"].get<std::string>();
  }
  const auto slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return backend.empty() ? base : base + " (" + backend + ")";
}

std::string cell(double v, const char* format) {
  return v < 0 ? std::string("-") : fmt::format(fmt::runtime(format), v);
}

}  // namespace

nlohmann::json parse_result_document(std::string_view text, const std::string& origin) {
  std::string_view body = text;
  // Captured stdout: take the last DRIVERRESULT= line.
  const std::string_view marker = "DRIVERRESULT=";
  if (const auto pos = text.rfind(marker);
      pos != std::string_view::npos && (pos == 0 || text[pos - 1] == '\n')) {
    body = text.substr(pos + marker.size());
    if (const auto nl = body.find('\n'); nl != std::string_view::npos) body = body.substr(0, nl);
  }
  // A key given twice in one object (nlohmann keeps the last silently) makes the document
  // ambiguous: which "registered" is the result? Refused, naming the key.
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string duplicate;
  const nlohmann::json::parser_callback_t find_duplicates =
      [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (event == E::object_start) {
          keys_of_open_objects.emplace_back();
        } else if (event == E::object_end && !keys_of_open_objects.empty()) {
          keys_of_open_objects.pop_back();
        } else if (event == E::key && !keys_of_open_objects.empty() && duplicate.empty() &&
                   !keys_of_open_objects.back().insert(parsed.get<std::string>()).second) {
          duplicate = parsed.get<std::string>();
        }
        return true;
      };
  nlohmann::json doc = nlohmann::json::parse(body, find_duplicates, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    throw UsageError("compare: '" + origin +
                     "' is not JSON (nor output with a DRIVERRESULT= line)");
  }
  if (!duplicate.empty()) {
    std::string key = duplicate.substr(0, 64);
    for (char& c : key) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    throw UsageError(
        fmt::format("compare: '{}' has the key \"{}\" twice in one object; give the "
                    "file as the benchmark wrote it",
                    origin, key));
  }
  if (!doc.is_object() || !doc.contains("schema_version")) {
    throw UsageError("compare: '" + origin +
                     "' is not a zero3-offload-bench result (no schema_version)");
  }
  if (!doc["schema_version"].is_number_integer() ||
      doc["schema_version"].get<long long>() != kSchemaVersion) {
    throw UsageError(fmt::format("compare: '{}' has schema_version {}; this build reads {}", origin,
                                 doc["schema_version"].dump(), kSchemaVersion));
  }
  if (!doc.contains("workload") || !doc["workload"].is_object()) {
    throw UsageError("compare: '" + origin + "' has no workload object");
  }
  bool any_arm = false;
  for (const char* arm : kArmNames) {
    if (doc.contains(arm) && !doc[arm].is_object() && !doc[arm].is_null()) {
      throw UsageError(fmt::format("compare: '{}': \"{}\" is not an object", origin, arm));
    }
    any_arm = any_arm || (doc.contains(arm) && doc[arm].is_object());
  }
  if (!any_arm) {
    throw UsageError("compare: '" + origin +
                     "' has no arm results (registered, unregistered, "
                     "pageable or hostalloc); give a file the benchmark wrote");
  }
  return doc;
}

nlohmann::json read_result_file(const std::string& path, const std::string& command) {
  try {
    return parse_result_document(read_whole(path), path);
  } catch (const UsageError& e) {
    std::string why = e.what();
    const std::string own = "compare: ";
    if (command != "compare" && why.rfind(own, 0) == 0)
      why = command + ": " + why.substr(own.size());
    throw UsageError(why);
  }
}

namespace {

// Refuses (UsageError naming the first differing key) files of different workloads.
void check_same_workload(const std::vector<nlohmann::json>& docs,
                         const std::vector<std::string>& files) {
  const auto& ref = docs.front()["workload"];
  for (std::size_t f = 1; f < docs.size(); ++f) {
    const auto& w = docs[f]["workload"];
    std::set<std::string> keys;
    for (const auto& [k, v] : ref.items()) keys.insert(k);
    for (const auto& [k, v] : w.items()) keys.insert(k);
    for (const auto& k : keys) {
      // Absent and null both mean "does not apply" (a key added later, e.g. decoder).
      const auto a = ref.contains(k) && !ref[k].is_null() ? ref[k].dump() : "null";
      const auto b = w.contains(k) && !w[k].is_null() ? w[k].dump() : "null";
      if (a != b) {
        throw UsageError(fmt::format(
            "compare: the workloads differ: {} is {} in '{}' but {} in '{}'; rerun with the same "
            "flags, or pass --force",
            k, a, files.front(), b, files[f]));
      }
    }
  }
}

// Width of a file's column: its label, or the widest cell ("   0.1234 s/step  x1.000").
constexpr std::size_t kCellWidth = 27;
std::size_t column_width(const std::string& label) { return std::max(label.size(), kCellWidth); }

// The phases' median time per step of an arm object (device time where the phase has it).
double phase_ms(const nlohmann::json& doc, const char* arm, const std::string& phase) {
  if (!doc.contains(arm) || !doc[arm].is_object() || !doc[arm].contains("phases")) return -1;
  const auto& phases = doc[arm]["phases"];
  if (!phases.is_object() || !phases.contains(phase) || !phases[phase].is_object()) return -1;
  const double dev = number_or(phases[phase], "device_s", -1);
  const double host = number_or(phases[phase], "host_s", -1);
  return (dev >= 0 ? dev : host) >= 0 ? (dev >= 0 ? dev : host) * 1e3 : -1;
}

// "phase deltas": per arm and phase, the milliseconds in each file and the change from the
// first file's, so that where the time went is read, not only how much.
void phase_deltas(const char* arm, const std::vector<nlohmann::json>& docs,
                  const std::vector<std::size_t>& widths, std::ostringstream& text) {
  std::vector<std::string> names;
  for (const auto& d : docs) {
    if (!d.contains(arm) || !d[arm].is_object() || !d[arm].contains("phases") ||
        !d[arm]["phases"].is_object()) {
      continue;
    }
    for (const auto& [n, v] : d[arm]["phases"].items()) {
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  for (const auto& n : names) {
    text << fmt::format("{:<14}{:<14}", arm, n);
    const double first = phase_ms(docs.front(), arm, n);
    for (std::size_t f = 0; f < docs.size(); ++f) {
      const double ms = phase_ms(docs[f], arm, n);
      std::string c = ms < 0 ? "-" : fmt::format("{:.3f} ms", ms);
      if (f > 0 && ms >= 0 && first >= 0) c += fmt::format(" ({:+.3f})", ms - first);
      text << fmt::format(" | {:>{}}", c, widths[f]);
    }
    text << '\n';
  }
}

// One arm's row: its average step in each file and the ratio to the first file's.
nlohmann::json arm_row(const char* arm, const std::vector<nlohmann::json>& docs,
                       const std::vector<std::size_t>& widths, std::ostringstream& text) {
  text << fmt::format("{:<14}", arm);
  double first = -1;
  nlohmann::json per_file = nlohmann::json::array();
  for (const auto& d : docs) {
    const double avg =
        d.contains(arm) && d[arm].is_object() ? number_or(d[arm], "step_avg_s", -1) : -1;
    if (first < 0) first = avg;
    const double ratio = (first > 0 && avg > 0) ? avg / first : -1;
    const std::string c = fmt::format("{:>12} s/step {:>7}", cell(avg, "{:.4f}"),
                                      ratio > 0 ? fmt::format("x{:.3f}", ratio) : "-");
    text << fmt::format(" | {:>{}}", c, widths[per_file.size()]);
    nlohmann::json entry{
        {"step_avg_s", avg > 0 ? nlohmann::json(avg) : nlohmann::json(nullptr)},
        {"ratio_to_first", ratio > 0 ? nlohmann::json(ratio) : nlohmann::json(nullptr)}};
    if (d.contains(arm) && d[arm].is_object() && d[arm].contains("phases"))
      entry["phases"] = d[arm]["phases"];
    per_file.push_back(std::move(entry));
  }
  text << '\n';
  return per_file;
}

}  // namespace

Comparison compare_results(const CompareOptions& options) {
  if (options.files.size() < 2) throw UsageError("compare: give at least two result files");
  std::vector<nlohmann::json> docs;
  std::vector<std::string> labels;
  for (const auto& path : options.files) {
    docs.push_back(parse_result_document(read_whole(path), path));
    labels.push_back(label_of(docs.back(), path));
  }
  if (!options.force) check_same_workload(docs, options.files);

  Comparison out;
  out.doc = {{"files", options.files}, {"labels", labels}, {"workload", docs.front()["workload"]}};
  std::ostringstream text;
  std::vector<std::size_t> widths;
  for (const auto& l : labels) widths.push_back(column_width(l));
  text << fmt::format("{:<14}", "arm");
  for (std::size_t f = 0; f < labels.size(); ++f)
    text << fmt::format(" | {:>{}}", labels[f], widths[f]);
  text << '\n';
  nlohmann::json arms = nlohmann::json::object();
  std::vector<const char*> present_arms;
  for (const char* arm : kArmNames) {
    bool present = false;
    for (const auto& d : docs) present |= d.contains(arm) && d[arm].is_object();
    if (present) {
      arms[arm] = arm_row(arm, docs, widths, text);
      present_arms.push_back(arm);
    }
  }
  out.doc["arms"] = arms;
  text << fmt::format("{:<14}", "speedup");
  nlohmann::json speedups = nlohmann::json::array();
  for (std::size_t f = 0; f < docs.size(); ++f) {
    const double s = number_or(docs[f], "speedup", -1);
    text << fmt::format(" | {:>{}}", s > 0 ? fmt::format("{:.2f}x", s) : "-", widths[f]);
    speedups.push_back(s > 0 ? nlohmann::json(s) : nlohmann::json(nullptr));
  }
  text << '\n';
  text << "\nphase deltas (median ms per step; in brackets the change from the first file)\n";
  text << fmt::format("{:<14}{:<14}", "arm", "phase");
  for (std::size_t f = 0; f < labels.size(); ++f)
    text << fmt::format(" | {:>{}}", labels[f], widths[f]);
  text << '\n';
  for (const char* arm : present_arms) phase_deltas(arm, docs, widths, text);
  out.doc["speedup"] = speedups;
  out.text = text.str();
  return out;
}

}  // namespace zob
