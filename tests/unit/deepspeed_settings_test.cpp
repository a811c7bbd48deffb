// The settings printed after the verdict (src/report/deepspeed_settings.cpp): for every arm that
// can win on cuda and on xpu, what a DeepSpeed user is told to set, and that the run's lines and
// DRIVERRESULT's "settings" follow the arm that won, the loop and the bytes each process locks.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "report/deepspeed_settings.hpp"
#include "report/details.hpp"
#include "report/report.hpp"

namespace {

using zob::Arm;

zob::ArmResult arm(Arm which, const std::string& device, double step_s, std::uint64_t locked) {
  zob::ArmResult r;
  r.arm = which;
  r.ok = true;
  r.device = device;
  r.warmup = 1;
  r.steps = 3;
  r.locked_bytes = locked;
  for (int i = 0; i < 4; ++i) {
    zob::StepSample s;
    s.wall_s = step_s;
    r.samples.push_back(s);
  }
  r.step_avg_s = step_s;
  r.step_min_s = step_s;
  return r;
}

// `rounds` rounds of `slow` against `fast` on `device`, `fast` faster by 2.5x (three rounds:
// an interval, 2.5-2.5, that excludes 1.0, so the verdict holds).
zob::RunResult run_of(const std::string& device, Arm fast, Arm slow, std::uint64_t locked = 0,
                      int rounds = 3) {
  zob::RunResult run;
  run.config.device = zob::parse_device_kind(device);
  run.config.arms = {fast, slow};
  run.config.repeats = rounds;
  for (int k = 0; k < rounds; ++k) {
    run.rounds.push_back({arm(fast, device, 0.2, locked), arm(slow, device, 0.5, locked)});
  }
  for (Arm a : run.config.arms) run.arms.push_back(zob::combine_rounds(zob::runs_of(run, a)));
  return run;
}

std::string env_of(const zob::ArmSettings& s) {
  std::string out;
  for (const auto& [k, v] : s.env) out += k + "=" + v + " ";
  return out;
}

TEST(DeepSpeedSettings, EachArmOnCudaNamesDeepSpeedsBackendAndRegistration) {
  const auto reg = zob::deepspeed_settings(Arm::registered, "cuda", 100);
  EXPECT_TRUE(reg.deepspeed_has_it);
  EXPECT_EQ(env_of(reg), "DS_PIN_MEMORY_BACKEND=native DS_PIN_MEMORY_REGISTER_DEVICE=1 ");
  EXPECT_TRUE(reg.pin_memory);
  EXPECT_EQ(reg.memlock_bytes, 100u);
  const auto unreg = zob::deepspeed_settings(Arm::unregistered, "cuda", 100);
  EXPECT_EQ(env_of(unreg), "DS_PIN_MEMORY_BACKEND=native DS_PIN_MEMORY_REGISTER_DEVICE=0 ");
  EXPECT_TRUE(unreg.pin_memory);
  EXPECT_EQ(unreg.memlock_bytes, 100u);
  const auto pageable = zob::deepspeed_settings(Arm::pageable, "cuda", 100);
  EXPECT_TRUE(pageable.env.empty());
  EXPECT_FALSE(pageable.pin_memory);
  EXPECT_EQ(pageable.memlock_bytes, 0u);
  const auto hostalloc = zob::deepspeed_settings(Arm::hostalloc, "cuda", 100);
  EXPECT_EQ(env_of(hostalloc), "DS_PIN_MEMORY_BACKEND=torch ");
  EXPECT_TRUE(hostalloc.pin_memory);
  EXPECT_EQ(hostalloc.memlock_bytes, 0u);
}

TEST(DeepSpeedSettings, OnXpuRegistrationHasNoDeepSpeedSettingAndSaysWhy) {
  const auto reg = zob::deepspeed_settings(Arm::registered, "xpu", 100);
  EXPECT_FALSE(reg.deepspeed_has_it);
  EXPECT_TRUE(reg.env.empty());
  EXPECT_NE(reg.note.find("deepspeedai/DeepSpeed#8315"), std::string::npos) << reg.note;
  EXPECT_NE(reg.note.find("hostalloc"), std::string::npos) << reg.note;
  // The native backend without registration is the unregistered arm as it is on xpu.
  const auto unreg = zob::deepspeed_settings(Arm::unregistered, "xpu", 100);
  EXPECT_TRUE(unreg.deepspeed_has_it);
  EXPECT_EQ(env_of(unreg), "DS_PIN_MEMORY_BACKEND=native ");
  EXPECT_EQ(unreg.memlock_bytes, 100u);
  EXPECT_FALSE(zob::deepspeed_settings(Arm::pageable, "xpu", 100).pin_memory);
  EXPECT_EQ(env_of(zob::deepspeed_settings(Arm::hostalloc, "xpu", 100)),
            "DS_PIN_MEMORY_BACKEND=torch ");
}

TEST(DeepSpeedSettings, TheLinesFollowTheArmThatWonTheLoopAndTheLockedBytes) {
  const std::uint64_t locked = 5338480640;  // the default plan's, results/h200 (one rank)
  zob::RunResult run = run_of("cuda", Arm::registered, Arm::unregistered, locked);
  std::string text = zob::render_settings_lines(run);
  EXPECT_NE(
      text.find("settings: to get the registered arm in DeepSpeed (0.19.8 or later, cuda):\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("export DS_PIN_MEMORY_BACKEND=native DS_PIN_MEMORY_REGISTER_DEVICE=1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ds_config zero_optimization.offload_optimizer.pin_memory: true\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ulimit -l 5213360 (KiB)"), std::string::npos) << text;
  EXPECT_NE(text.find("LimitMEMLOCK=5338480640"), std::string::npos) << text;
  const auto j = zob::settings_json(run);
  EXPECT_EQ(j.at("arm"), "registered");
  EXPECT_EQ(j.at("ulimit_l_kib"), 5213360);
  EXPECT_EQ(j.at("env").at("DS_PIN_MEMORY_REGISTER_DEVICE"), "1");
  EXPECT_EQ(j.at("lines").size(), 4u);

  // The offload_param loop pins the parameters too; two ranks lock half each.
  run.config.loop = zob::Loop::offload_param;
  for (auto& a : run.arms) a.gpus = 2;
  text = zob::render_settings_lines(run);
  EXPECT_NE(text.find("offload_optimizer.pin_memory: true, "
                      "zero_optimization.offload_param.pin_memory: true"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("memlock: 2669240320 bytes per process"), std::string::npos) << text;

  // When the unregistered arm is the faster one, it is the one the settings give.
  const auto lost = run_of("cuda", Arm::unregistered, Arm::registered, locked);
  EXPECT_EQ(zob::settings_json(lost).at("arm"), "unregistered");
  EXPECT_EQ(zob::settings_json(lost).at("env").at("DS_PIN_MEMORY_REGISTER_DEVICE"), "0");

  // Pageable memory that wins needs pin_memory false and no memlock.
  const auto pageable = run_of("xpu", Arm::pageable, Arm::registered);
  EXPECT_EQ(zob::settings_json(pageable)
                .at("ds_config")
                .at("zero_optimization.offload_optimizer.pin_memory"),
            false);
  EXPECT_NE(zob::render_settings_lines(pageable).find("memlock: nothing to raise"),
            std::string::npos);

  // xpu's registered arm: one line, no settings to copy.
  const auto xpu = run_of("xpu", Arm::registered, Arm::unregistered, locked);
  const auto jx = zob::settings_json(xpu);
  EXPECT_EQ(jx.at("deepspeed_has_it"), false);
  EXPECT_TRUE(jx.at("ds_config").empty());
  EXPECT_EQ(jx.at("lines").size(), 1u);
  EXPECT_EQ(zob::render_settings_lines(xpu).rfind("settings: the registered arm won on xpu; ", 0),
            0u);
}

// Issue 38: a deepspeed run with part of the optimizer on the device (--offload-ratio below 1)
// gives DeepSpeed's ratio key with the pin_memory ones; ratio 1 (DeepSpeed's default) and the
// what-if schedules, which have no ratio, do not.
TEST(DeepSpeedSettings, APartialOffloadRunNamesTheRatioKey) {
  zob::RunResult run = run_of("cuda", Arm::registered, Arm::unregistered, 1 << 20);
  run.config.schedule = zob::Schedule::deepspeed;
  const std::string key = "zero_optimization.offload_optimizer.ratio";
  EXPECT_FALSE(zob::settings_json(run).at("ds_config").contains(key));
  EXPECT_EQ(zob::render_settings_lines(run).find(key), std::string::npos);
  run.config.offload_ratio = 0.25;
  EXPECT_EQ(zob::settings_json(run).at("ds_config").at(key), 0.25);
  EXPECT_NE(
      zob::render_settings_lines(run).find(
          "ds_config zero_optimization.offload_optimizer.pin_memory: true, " + key + ": 0.25\n"),
      std::string::npos)
      << zob::render_settings_lines(run);
  run.config.schedule = zob::Schedule::stock;
  EXPECT_FALSE(zob::settings_json(run).at("ds_config").contains(key));
}

TEST(DeepSpeedSettings, TheCpuDeviceGetsOneLineAndNoArm) {
  const auto run = run_of("cpu", Arm::registered, Arm::unregistered, 100);
  const std::string text = zob::render_settings_lines(run);
  EXPECT_EQ(text.rfind("settings: none: nothing is registered on the CPU device", 0), 0u) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  const auto j = zob::settings_json(run);
  EXPECT_TRUE(j.at("arm").is_null());
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("memlock_bytes"), 0);
  // No comparison (one arm): no settings at all.
  zob::RunResult one;
  one.config.arms = {Arm::registered};
  one.arms = {arm(Arm::registered, "cuda", 0.2, 100)};
  EXPECT_EQ(zob::render_settings_lines(one), "");
  EXPECT_TRUE(zob::settings_json(one).is_null());
}

// Issue 37: no settings after a verdict that does not hold; one line says why not.
TEST(DeepSpeedSettings, AnInconclusiveVerdictGetsOneLineSayingWhyNot) {
  const auto one = run_of("cuda", Arm::registered, Arm::unregistered, 100, 1);
  std::string text = zob::render_settings_lines(one);
  EXPECT_EQ(text,
            "settings: none: the verdict is inconclusive: 1 round in which both arms completed "
            "gives no interval; run with --repeats 5 or more (no DeepSpeed setting follows from "
            "this run)\n");
  auto j = zob::settings_json(one);
  EXPECT_TRUE(j.at("arm").is_null());
  EXPECT_EQ(j.at("device"), "cuda");
  EXPECT_EQ(j.at("deepspeed_has_it"), false);
  // Three rounds whose ratios straddle 1.0 (0.8, 1.25, 2.5): the interval includes it.
  auto straddle = run_of("cuda", Arm::registered, Arm::unregistered, 100, 3);
  straddle.rounds[0][1] = arm(Arm::unregistered, "cuda", 0.16, 100);
  straddle.rounds[1][1] = arm(Arm::unregistered, "cuda", 0.25, 100);
  straddle.arms[1] = zob::combine_rounds(zob::runs_of(straddle, Arm::unregistered));
  text = zob::render_settings_lines(straddle);
  EXPECT_NE(text.find("settings: none: the verdict is inconclusive: its interval 0.80-2.50 "
                      "includes 1.0; raise --repeats"),
            std::string::npos)
      << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_TRUE(zob::settings_json(straddle).at("arm").is_null());
}

}  // namespace
