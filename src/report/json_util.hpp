// JSON helpers shared by the pipe format and the reports.
#pragma once
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob {

// Non-finite numbers have no JSON spelling: written as null, read back as NaN, so a NaN loss
// survives the child -> parent pipe instead of breaking the parse.
inline nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
inline double number_or_nan(const nlohmann::json& j) {
  return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>();
}

// Every document leaves the process through this: invalid UTF-8 (a hostname or device name
// with stray bytes) becomes U+FFFD instead of throwing, so the output is always valid JSON.
template <class Json>
std::string dump_json(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

void to_json(nlohmann::json&, const DeviceInfo&);
// The "ranks" array of a multi-rank arm (--gpus N), in the pipe format and in DRIVERRESULT.
nlohmann::json rank_results_json(const std::vector<RankResult>& ranks);
std::vector<RankResult> rank_results_from(const nlohmann::json& j);  // throws json::exception
void from_json(const nlohmann::json&, DeviceInfo&);

// The two documents an arm is written in.
enum class ArmDocument {
  pipe,           // child -> parent, read back by from_json: lossless, key order irrelevant
  driver_result,  // DRIVERRESULT / --json: the Python script's keys first, in its order; a
                  // failed arm's measurements are null
};
// Every field of an arm, for either document, from this one place (result_json.cpp), so the
// two cannot drift apart. DRIVERRESULT's arm_json (report.cpp) then appends the run-level
// details and, for a failed arm, the error. Json: nlohmann::json or nlohmann::ordered_json.
template <class Json>
Json arm_object(const ArmResult& r, ArmDocument doc);

}  // namespace zob
