// The run's settings, declared once (src/common/settings.cpp): each entry binds one RunConfig
// member (typed: the binding is checked by the compiler) to its flag, value name, --help text,
// range, JSON key, whether the result's workload shows it and, where the default is not a
// value, the words docs/usage.md gives for it. The default itself is the member's initializer
// in zob/config.hpp, the one place it is written. src/cli registers the CLI11 options and
// parses from this table, validate_run_config checks its ranges, to_json / from_json (the
// child's hand-over) read and write its keys, the report takes the workload's values from it,
// and a unit test holds --help, the JSON and docs/usage.md's flag table against it.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zob/config.hpp"

namespace zob {

// Ceilings far above any real workload; they keep every derived size well inside 64 bits and
// turn a typo like --hidden 20480000 into a clear refusal instead of an allocation failure.
namespace limits {
inline constexpr std::int64_t hidden = 1 << 20;
inline constexpr std::int64_t layers = 100'000;
inline constexpr std::int64_t batch = 1 << 20;
inline constexpr std::int64_t seq = 1 << 24;
inline constexpr std::int64_t vocab = std::numeric_limits<std::int32_t>::max();  // int32 ids
inline constexpr std::int64_t steps = 1'000'000;
inline constexpr std::int64_t device_index = 1023;
inline constexpr std::int64_t threads = 4096;
inline constexpr std::int64_t elems = std::int64_t{1} << 50;
inline constexpr double timeout_s = 1e7;
inline constexpr std::int64_t gpus = 64;  // the shared-memory collectives' rank limit
inline constexpr std::int64_t repeats = 10'000;
inline constexpr double device_memory_bytes = 1e15;  // --device-memory: 1 PB
}  // namespace limits

enum class FlagKind {
  none,         // no flag of its own: set along with another one (the sweeps), JSON only
  integer,      // a whole number in [min, max]
  toggle,       // no value
  value,        // any other value, parsed by `parse` (names, lists, seconds, the seed)
  output_file,  // a file to write: checked writable by the CLI, then `parse`d
  command,      // changes what runs, not the RunConfig (handled by the CLI itself)
};

struct Setting {
  std::string flag;        // "--hidden"; "" for FlagKind::none
  std::string value_name;  // "N"; "" for a toggle
  std::string help;        // the --help text
  FlagKind kind = FlagKind::none;
  // The values an integer flag accepts, and the range validate_run_config checks on `get`
  // (every setting with one): [config_min, max]. max 0: no range.
  std::int64_t min = 0, max = 0, config_min = 0;
  std::string json_key;   // in the child's hand-over; "" for a command
  bool workload = false;  // shown in DRIVERRESULT's "workload"
  // docs/usage.md's default column where the default is not a value ("synthetic", "the
  // device's NUMA node"); otherwise derived (default_text, "off" for a toggle, ...).
  std::string doc_words;
  // A command's default, as --help shows it (a command has no RunConfig member).
  std::string command_default;
  // The default --help shows when the CLI resolves it at run time (--threads: the CPUs).
  std::string (*resolved_default)() = nullptr;
  // The default on cuda / xpu where it differs from the member's (the CPU device's):
  // kAcceleratorRounds' value for --repeats / --warmup / --steps; -1: none.
  int accelerator_default = -1;

  // Bound to the member by the declaration; empty where the kind has no use for them.
  std::function<nlohmann::json(const RunConfig&)> write;        // its JSON value
  std::function<void(const nlohmann::json&, RunConfig&)> read;  // from its JSON value
  std::function<std::string(const RunConfig&)> text;            // as --help shows a value
  std::function<std::int64_t(const RunConfig&)> get;            // a whole number: its range
  std::function<void(RunConfig&, std::int64_t)> set;            // integer and toggle kinds
  std::function<void(RunConfig&, const std::string&)> parse;    // value and output_file kinds

  bool has_flag() const { return kind != FlagKind::none; }
  // The [default] --help shows ("2048"); "" where it shows none.
  std::string help_default() const;
  // docs/usage.md's default column ("2048", "off", "none", the doc words).
  std::string doc_default() const;
};

// Every setting; those with a flag in --help order.
std::span<const Setting> settings();
// The setting of `flag` ("--hidden") or of JSON key `key`; throws std::out_of_range.
const Setting& setting_of_flag(std::string_view flag);
const Setting& setting_of_key(std::string_view key);

// "a whole number from 1 to 4096"
std::string range_text(std::int64_t min, std::int64_t max);

// Strict number parsing for flag values: the whole text, in [min, max]. Throws UsageError
// naming the flag and the accepted range.
std::int64_t parse_integer_flag(const std::string& flag, const std::string& text, std::int64_t min,
                                std::int64_t max);
std::uint64_t parse_unsigned_flag(const std::string& flag, const std::string& text);
double parse_seconds_flag(const std::string& flag, const std::string& text, double max,
                          const char* zero_means = "no limit");
// A size in bytes: "24GB" (10^9), "24GiB" (2^30), "512MB", "80G" (= GB), "1.5TB", "4096" (bytes);
// 0 means `zero_means`. UsageError naming the flag and the forms otherwise.
std::uint64_t parse_bytes_flag(const std::string& flag, const std::string& text,
                               const char* zero_means);
// "a,b,c" of whole numbers, each in [min, max] and given once.
std::vector<std::int64_t> parse_integer_list(const std::string& flag, const std::string& text,
                                             std::int64_t min, std::int64_t max);
// "1,0.5,0.25": numbers from 0 to 1, each given once.
std::vector<double> parse_fraction_list(const std::string& flag, const std::string& text);
// "registered,pageable": each a known arm, given once.
std::vector<Arm> parse_arm_list(const std::string& text);

}  // namespace zob
