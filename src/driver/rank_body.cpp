#include "driver/rank_body.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "report/json_util.hpp"
#include "zob/errors.hpp"
#include "zob/step.hpp"
#include "zob/text.hpp"

namespace zob {

int rank_device_index(const RunConfig& config, int local_rank, bool ranks_share_device) {
  if (config.device == DeviceKind::cpu || ranks_share_device) return config.device_index;
  return config.device_index + local_rank;
}

ArmResult run_rank_body(const RunConfig& config, Arm arm, Device& device, Collectives& host,
                        bool ranks_share_device) {
  std::unique_ptr<Collectives> device_comm;
  try {
    device_comm =
        device.make_rank_collectives(host, {collective_timeout_s(config), ranks_share_device});
  } catch (const CollectiveError&) {
    throw;  // a peer failed: it has told the others already
  } catch (const std::exception& e) {
    host.abort(fmt::format("rank {} could not join the device collectives: {}", host.rank(),
                           one_line(e.what())));
    throw;
  }
  return run_rank_arm(config, arm, device, host, device_comm ? *device_comm : host);
}

std::string result_document(ArmResult& result, Arm arm) {
  result.arm = arm;
  result.pid = static_cast<int>(::getpid());
  return dump_json(nlohmann::json(result));
}

double collective_timeout_s(const RunConfig& config) {
  constexpr double kDefault = 120.0;
  return config.timeout_s > 0 ? std::min(kDefault, config.timeout_s / 2) : kDefault;
}

}  // namespace zob
