// The strict parsing of flag values (zob/settings.hpp): whole numbers, seconds, lists.
#include "zob/settings.hpp"

#include <fmt/format.h>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "zob/errors.hpp"
#include "zob/text.hpp"

namespace zob {

std::string range_text(std::int64_t min, std::int64_t max) {
  return fmt::format("a whole number from {} to {}", min, max);
}

std::int64_t parse_integer_flag(const std::string& flag, const std::string& text, std::int64_t min,
                                std::int64_t max) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  const bool digits = !text.empty() && end == s + text.size() &&
                      text.find_first_not_of("+-0123456789") == std::string::npos;
  if (!digits) {
    throw UsageError(
        fmt::format("{} '{}' is not a whole number; give {}", flag, text, range_text(min, max)));
  }
  if (errno == ERANGE || v < min || v > max) {
    throw UsageError(
        fmt::format("{} {} is out of range; give {}", flag, text, range_text(min, max)));
  }
  return v;
}

std::uint64_t parse_unsigned_flag(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      end != text.c_str() + text.size()) {
    throw UsageError(fmt::format("{} '{}' is not a whole number; give one from 0 to {}", flag, text,
                                 std::numeric_limits<std::uint64_t>::max()));
  }
  if (errno == ERANGE) {
    throw UsageError(fmt::format("{} {} is out of range; give one from 0 to {}", flag, text,
                                 std::numeric_limits<std::uint64_t>::max()));
  }
  return v;
}

double parse_seconds_flag(const std::string& flag, const std::string& text, double max,
                          const char* zero_means) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) ||
      text.find_first_of("xXpPnN") != std::string::npos) {
    throw UsageError(
        fmt::format("{} '{}' is not a number of seconds; give e.g. 30 or 0.5 "
                    "(0 = {})",
                    flag, text, zero_means));
  }
  if (v < 0 || v > max) {
    throw UsageError(fmt::format("{} {} is out of range; give 0 ({}) to {:g} seconds", flag, text,
                                 zero_means, max));
  }
  return v;
}

std::uint64_t parse_bytes_flag(const std::string& flag, const std::string& text,
                               const char* zero_means) {
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"B", 1},
                                                          {"KB", 1e3},
                                                          {"MB", 1e6},
                                                          {"GB", 1e9},
                                                          {"TB", 1e12},
                                                          {"K", 1e3},
                                                          {"M", 1e6},
                                                          {"G", 1e9},
                                                          {"T", 1e12},
                                                          {"KiB", 1024.},
                                                          {"MiB", 1048576.},
                                                          {"GiB", 1073741824.},
                                                          {"TiB", 1099511627776.}};
  const auto fail = [&] {
    return UsageError(fmt::format(
        "{} '{}' is not a size; give e.g. 24GB (10^9 bytes), 24GiB (2^30), 512MB or a number of "
        "bytes (0 = {})",
        flag, text, zero_means));
  };
  const std::size_t split = text.find_first_not_of("0123456789.");
  const std::string number = text.substr(0, split);
  const std::string unit = split == std::string::npos ? "" : text.substr(split);
  if (number.empty() || number.find('.') != number.rfind('.')) throw fail();
  double scale = 0;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  if (scale == 0) throw fail();
  const double bytes = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(bytes) || bytes > limits::device_memory_bytes) {
    throw UsageError(
        fmt::format("{} {} is out of range; give 0 ({}) to 1PB", flag, text, zero_means));
  }
  return static_cast<std::uint64_t>(bytes);
}

std::vector<std::int64_t> parse_integer_list(const std::string& flag, const std::string& text,
                                             std::int64_t min, std::int64_t max) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_list(text)) {
    if (item.empty()) {
      throw UsageError(
          fmt::format("{} '{}' has an empty value; give one number or a "
                      "comma-separated list such as 16777216,67108864",
                      flag, text));
    }
    const std::int64_t v = parse_integer_flag(flag, item, min, max);
    for (std::int64_t seen : out) {
      if (seen == v) {
        throw UsageError(fmt::format("{} lists {} twice; list each value once", flag, v));
      }
    }
    out.push_back(v);
  }
  return out;
}

std::vector<double> parse_fraction_list(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : split_list(text)) {
    char* end = nullptr;
    const double v = item.empty() ? 0.0 : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0.0 && v <= 1.0)) {
      throw UsageError(fmt::format(
          "{} '{}' is not a fraction from 0 to 1; give one or a comma-separated list such as "
          "1,0.5,0.25",
          flag, item));
    }
    for (double seen : out) {
      if (seen == v)
        throw UsageError(fmt::format("{} lists {:g} twice; list each value once", flag, v));
    }
    out.push_back(v);
  }
  return out;
}

std::vector<Arm> parse_arm_list(const std::string& text) {
  std::vector<Arm> arms;
  std::set<std::string> seen;
  for (const std::string& name : split_list(text)) {
    if (name.empty()) {
      throw UsageError("--arms '" + text +
                       "' has an empty arm name; give a comma-separated "
                       "list such as registered,unregistered");
    }
    Arm arm{};
    try {
      arm = parse_arm(name);
    } catch (const UsageError&) {
      throw UsageError("--arms: unknown arm '" + name +
                       "'; use registered, unregistered, pageable or hostalloc");
    }
    if (!seen.insert(name).second) {
      throw UsageError("--arms: arm '" + name + "' is listed twice; list each arm once");
    }
    arms.push_back(arm);
  }
  return arms;
}

}  // namespace zob
