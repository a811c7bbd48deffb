// libFuzzer target: the child -> parent pipe reader. The parent turns whatever bytes an arm's
// child wrote into an ArmResult with nlohmann::json::parse(...).get<ArmResult>() (parent.cpp,
// collect_arm), catching std::exception; an accepted result then goes through the reports and
// the validation. Any input must either be refused with an exception the parent catches
// (nlohmann::json::exception, or UsageError for an unknown arm name) or be reported -- never
// crash, hang, leak or trip a sanitizer (a huge "steps" or "warmup" included).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "report/json_util.hpp"
#include "report/report.hpp"
#include "zob/errors.hpp"
#include "zob/result.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  zob::ArmResult arm;
  try {
    arm = nlohmann::json::parse(bytes).get<zob::ArmResult>();
  } catch (const nlohmann::json::exception&) {
    return 0;
  } catch (const zob::UsageError&) {
    return 0;
  }
  // Reported next to a second arm with the same numbers, as the parent would.
  zob::RunResult run;
  run.config.arms = {zob::Arm::registered, zob::Arm::unregistered};
  zob::ArmResult other = arm;
  arm.arm = zob::Arm::registered;
  other.arm = zob::Arm::unregistered;
  run.arms = {arm, other};
  run.hostname = "fuzz";
  (void)zob::validate_arms(run);
  (void)zob::speedup(run);
  (void)zob::render_stdout(run);
  (void)zob::dump_json(zob::driver_result_json(run));
  return 0;
}
