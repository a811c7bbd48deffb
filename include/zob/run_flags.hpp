// The benchmark run's flags, declared once: each entry names the flag, its value, its --help
// text, its default as docs/usage.md prints it, its range and how it sets its RunConfig field.
// src/cli registers the CLI11 options from this table, validate_run_config checks the same
// ranges, and a unit test compares docs/usage.md's flag table with it.
#pragma once
#include <cstdint>
#include <limits>
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
}  // namespace limits

enum class FlagKind {
  integer,      // a whole number in [min, max], written by `set`
  toggle,       // no value; `set` receives 1
  value,        // any other value, parsed by `parse` (names, lists, seconds, the seed)
  output_file,  // a file to write: checked writable by the CLI, then `parse`d
  command,      // changes what runs, not the RunConfig (handled by the CLI itself)
};

struct RunFlag {
  const char* name;         // "--hidden"
  const char* value_name;   // "N"; "" for a toggle
  std::string help;         // the --help text
  std::string doc_default;  // the default column of docs/usage.md's table ("" = empty)
  FlagKind kind;
  // The values the flag accepts (integer kind) and the range validate_run_config checks on
  // `get` (any kind with `get`): [config_min, max].
  std::int64_t min = 0;
  std::int64_t max = 0;
  std::int64_t config_min = 0;
  std::int64_t (*get)(const RunConfig&) = nullptr;
  void (*set)(RunConfig&, std::int64_t) = nullptr;
  void (*parse)(RunConfig&, const std::string&) = nullptr;
  // The [default] --help shows; nullptr: none.
  std::string (*help_default)() = nullptr;
};

// Every run flag, in --help order.
std::span<const RunFlag> run_flags();
// The entry named `name` ("--hidden"); throws std::out_of_range for an unknown name.
const RunFlag& run_flag(std::string_view name);

// "a whole number from 1 to 4096"
std::string range_text(std::int64_t min, std::int64_t max);

// Strict number parsing for flag values: the whole text, in [min, max]. Throws UsageError
// naming the flag and the accepted range.
std::int64_t parse_integer_flag(const std::string& flag, const std::string& text, std::int64_t min,
                                std::int64_t max);
std::uint64_t parse_unsigned_flag(const std::string& flag, const std::string& text);
double parse_seconds_flag(const std::string& flag, const std::string& text, double max);
// "a,b,c" of whole numbers, each in [min, max] and given once.
std::vector<std::int64_t> parse_integer_list(const std::string& flag, const std::string& text,
                                             std::int64_t min, std::int64_t max);

}  // namespace zob
