// Seeds for the unit tests that draw fresh random inputs every run: each seed is printed (the
// test's output, which ctest shows with a failure) and recorded in the XML report, so a failing
// draw can be replayed.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

namespace zob::test {

// A fresh 64-bit seed from std::random_device, named `what` in the output. Inside a test it is
// also recorded as the test's property "seed"; outside one (a global generator) it is printed.
inline std::uint64_t random_seed(const char* what) {
  const std::uint64_t seed =
      (std::uint64_t{std::random_device{}()} << 32) | std::uint64_t{std::random_device{}()};
  std::printf("%s: random seed %llu\n", what, static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  if (::testing::UnitTest::GetInstance()->current_test_info() != nullptr) {
    ::testing::Test::RecordProperty("seed", std::to_string(seed));
  }
  return seed;
}

}  // namespace zob::test
