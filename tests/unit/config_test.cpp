#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "zob/config.hpp"
#include "zob/errors.hpp"

TEST(Config, JsonRoundTripKeepsEveryField) {
  zob::RunConfig c;
  c.model = {1000, 64, 3};
  c.batch = 3;
  c.seq = 17;
  c.steps = 5;
  c.warmup = 1;
  c.device = zob::DeviceKind::xpu;
  c.device_index = 2;
  c.arms = {zob::Arm::hostalloc, zob::Arm::pageable};
  c.loop = zob::Loop::offload_param;
  c.chunk_elems = 12345;
  c.sub_group_size = 777;
  c.threads = 3;
  c.seed = 99;
  c.json_path = "out.json";
  c.timeout_s = 12.5;
  c.repeats = 3;
  c.trace_path = "t.json";
  c.skip_preflight = true;
  nlohmann::json j = c;
  zob::RunConfig d = j.get<zob::RunConfig>();
  EXPECT_EQ(nlohmann::json(d), j);
  EXPECT_EQ(d.arms, c.arms);
  EXPECT_EQ(d.loop, zob::Loop::offload_param);
  EXPECT_EQ(d.repeats, 3);
  EXPECT_EQ(d.trace_path, "t.json");
  EXPECT_TRUE(d.skip_preflight);
}

TEST(Config, UnknownNamesAreUsageErrors) {
  EXPECT_THROW(zob::parse_arm("pinned"), zob::UsageError);
  EXPECT_THROW(zob::parse_device_kind("gpu"), zob::UsageError);
  EXPECT_EQ(zob::parse_arm("hostalloc"), zob::Arm::hostalloc);
}
