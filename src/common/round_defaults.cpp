// apply_device_round_defaults (zob/config.hpp): the default rounds depend on the device, which
// --device auto only knows after the probe, so the CLI marks what was left out and the driver
// fills it in here.
#include "zob/config.hpp"

namespace zob {

void apply_device_round_defaults(RunConfig& c) {
  const bool accelerator = c.device != DeviceKind::cpu && c.device != DeviceKind::automatic;
  if (accelerator) {
    if (c.left_to_device.repeats) c.repeats = kAcceleratorRounds.repeats;
    if (c.left_to_device.warmup) c.warmup = kAcceleratorRounds.warmup;
    if (c.left_to_device.steps) c.steps = kAcceleratorRounds.steps;
  }
  c.left_to_device = {};
}

}  // namespace zob
