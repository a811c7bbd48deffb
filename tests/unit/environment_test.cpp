#include <gtest/gtest.h>

#include <unistd.h>

#include "zob/environment.hpp"

TEST(Environment, ParsesMeminfoAndThpMode) {
  const std::string meminfo =
      "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
  EXPECT_EQ(zob::meminfo_bytes(meminfo, "MemTotal"), 24576000ull * 1024);
  EXPECT_EQ(zob::meminfo_bytes(meminfo, "MemAvailable"), 20000000ull * 1024);
  EXPECT_EQ(zob::meminfo_bytes(meminfo, "Missing"), 0u);
  EXPECT_EQ(zob::selected_thp_mode("always [madvise] never\n"), "madvise");
  EXPECT_EQ(zob::selected_thp_mode("[always] madvise never"), "always");
  EXPECT_EQ(zob::selected_thp_mode(""), "");
}

TEST(Environment, CollectsThisHost) {
  const auto e = zob::collect_host_environment();
  EXPECT_GT(e.mem_total, 0u);
  EXPECT_GT(e.mem_available, 0u);
  EXPECT_LE(e.mem_available, e.mem_total);
  EXPECT_EQ(e.logical_cpus, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_GE(e.available_cpus, 1);
  EXPECT_FALSE(e.kernel.empty());
  EXPECT_EQ(e.utc_start.size(), 20u);  // 2026-11-29T12:00:00Z
  const auto j =
      zob::environment_json(e, zob::DeviceInfo{"cpu", "a \"quoted\"\nname", "", "", "", 1, -1});
  EXPECT_EQ(j["device"]["name"], "a \"quoted\"\nname");
  EXPECT_EQ(nlohmann::json::parse(j.dump())["device"]["name"], j["device"]["name"]);
}

TEST(Environment, UnknownPciBusIdGivesEmptyLink) {
  const auto link = zob::read_pcie_link("0000:ff:1f.7");
  EXPECT_EQ(link.current_width, 0);
  EXPECT_TRUE(link.current_speed.empty());
}
