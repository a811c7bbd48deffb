// --gpus N on CUDA: the rank-order sum kernel against the CPU reduction every collective
// shares (bitwise), NCCL collectives of one rank on device memory, and the partitioned step
// over NCCL reproducing run_arm bit for bit. Several ranks need several processes: the
// binary-level test (ZOB_TEST_SHARE_DEVICE) runs them, see scripts/cuda-ranks-check.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../unit/small_model_config.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "collectives/reduce.hpp"
#include "gpu_test_util.hpp"
#include "step/ranks/partitioned_step.hpp"
#include "step/step_internal.hpp"
#include "zob/collectives.hpp"
#include "zob/step.hpp"
#ifdef ZOB_WITH_NCCL
#include "backends/cuda/nccl_collectives.hpp"
#endif

namespace zob::gpu_test {
namespace {

// Parts in threes: small (~1), big (~1e6), then exactly minus the big one. In rank order the
// small values are rounded to the big values' ulp before the big ones cancel; in reverse the
// big ones cancel first and the small values survive whole. So the order of the additions
// changes most elements, and a reordered sum cannot pass.
template <class T>
std::vector<T> parts_data(int parts, std::size_t n) {
  std::vector<T> v;
  for (int r = 0; r < parts; ++r) {
    if (r % 3 == 2) {
      const std::size_t prev = static_cast<std::size_t>(r - 1) * n;
      for (std::size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, bf16>) {
          v.push_back(bf16{static_cast<std::uint16_t>(v[prev + i].bits ^ 0x8000u)});
        } else {
          v.push_back(-v[prev + i]);
        }
      }
      continue;
    }
    const float scale = r % 3 == 0 ? 1.0f : 1e6f;
    if constexpr (std::is_same_v<T, bf16>) {
      const auto p = random_bf16(n, scale);
      v.insert(v.end(), p.begin(), p.end());
    } else {
      const auto p = random_f32(n, scale);
      v.insert(v.end(), p.begin(), p.end());
    }
  }
  return v;
}

template <class T>
void check_sum_kernel(ElemType type) {
  constexpr std::size_t n = 4099;  // not a multiple of any vector width
  for (int parts : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE("parts " + std::to_string(parts));
    const std::vector<T> host = parts_data<T>(parts, n);
    DeviceBuffer<T> in(gpu(), host);
    DeviceBuffer<float> out(gpu(), n);
    ASSERT_EQ(cuda::launch_sum_rank_parts(in.get(), parts, static_cast<std::int64_t>(n),
                                          type == ElemType::bf16, out.get(),
                                          gpu().stream(Queue::compute)),
              cudaSuccess);
    const std::vector<float> got = out.download();

    std::vector<const void*> ptrs, reversed;
    for (int r = 0; r < parts; ++r) ptrs.push_back(host.data() + static_cast<std::size_t>(r) * n);
    reversed.assign(ptrs.rbegin(), ptrs.rend());
    std::vector<float> want(n), other(n);
    collectives_detail::sum_in_rank_order(ptrs.data(), parts, type, want.data(), n);
    collectives_detail::sum_in_rank_order(reversed.data(), parts, type, other.data(), n);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0);
    // The data is such that order matters: this test could catch a reordered sum.
    if (parts >= 3) {
      EXPECT_NE(std::memcmp(want.data(), other.data(), n * 4), 0);
    }
  }
}

TEST(NcclCollectives, SumKernelIsTheRankOrderReductionBf16) {
  ZOB_REQUIRE_GPU();
  check_sum_kernel<bf16>(ElemType::bf16);
}

TEST(NcclCollectives, SumKernelIsTheRankOrderReductionF32) {
  ZOB_REQUIRE_GPU();
  check_sum_kernel<float>(ElemType::f32);
}

#ifdef ZOB_WITH_NCCL
// One rank through the real NCCL library (several ranks need several processes).
#define ZOB_REQUIRE_NCCL()                            \
  ZOB_REQUIRE_GPU();                                  \
  try {                                               \
    gpu().check_rank_collectives();                   \
  } catch (const std::exception& e) {                 \
    GTEST_SKIP() << "NCCL unavailable: " << e.what(); \
  }

TEST(NcclCollectives, OneRankMovesDeviceMemoryExactly) {
  ZOB_REQUIRE_NCCL();
  SingleRankCollectives host;
  auto comm = gpu().make_rank_collectives(host, {30.0, false});
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  const std::size_t n = 3001;

  const auto shard = random_bf16(n);
  DeviceBuffer<bf16> src(gpu(), shard);
  DeviceBuffer<bf16> full(gpu(), n);
  comm->all_gather(src.get(), full.get(), n * 2);
  const auto gathered = full.download();
  EXPECT_EQ(std::memcmp(gathered.data(), shard.data(), n * 2), 0);

  DeviceBuffer<float> sum(gpu(), n);
  comm->reduce_scatter(src.get(), ElemType::bf16, sum.get(), n);
  const auto summed = sum.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(summed[i], bf16_to_f32(shard[i])) << i;

  const auto values = random_f32(n);
  DeviceBuffer<float> data(gpu(), values);
  comm->broadcast(data.get(), n * 4, 0);
  const auto after = data.download();
  EXPECT_EQ(std::memcmp(after.data(), values.data(), n * 4), 0);
  comm->barrier();
  // reduce_scatter's staging (one piece per rank) goes with the communicator.
  const std::size_t with_comm = gpu().memory_in_use();
  comm.reset();
  EXPECT_EQ(with_comm - gpu().memory_in_use(), n * 2);
}

TEST(NcclCollectives, PartitionedStepOverNcclIsBitwiseRunArm) {
  ZOB_REQUIRE_NCCL();
  RunConfig c = test::small_model_config(2, 1, 2, test_seed());  // P = 2632
  c.sub_group_size = 1000;
  c.chunk_elems = 300;
  std::vector<float> ref_master, master;
  const ArmResult ref = step_detail::run_arm_capture(c, Arm::registered, gpu(), &ref_master);
  ASSERT_TRUE(ref.ok) << ref.error;
  SingleRankCollectives host;
  auto data = gpu().make_rank_collectives(host, {30.0, false});
  const ArmResult r = run_partitioned_arm(c, Arm::registered, gpu(), host, *data, &master);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(master.size(), ref_master.size());
  EXPECT_EQ(std::memcmp(master.data(), ref_master.data(), master.size() * 4), 0);
  ASSERT_EQ(r.samples.size(), ref.samples.size());
  for (std::size_t i = 0; i < r.samples.size(); ++i) {
    EXPECT_EQ(std::memcmp(&r.samples[i].loss, &ref.samples[i].loss, 4), 0) << "step " << i;
  }
}

// The step's forms: each collective runs after what its queue was given before it and before
// what it is given after, with no host wait in between. A large copy feeds each collective on
// its queue and a copy out reads its result on the same queue; any missing order shows as
// stale bytes (the destinations start as other random data).
TEST(NcclCollectives, EnqueuedFormsAreOrderedWithTheirQueue) {
  ZOB_REQUIRE_NCCL();
  SingleRankCollectives host;
  auto comm = gpu().make_rank_collectives(host, {30.0, false});
  const std::size_t n = std::size_t{1} << 24;  // 32 MiB of bf16: the copy takes a while
  const auto shard = random_bf16(n);
  DeviceBuffer<bf16> src(gpu(), random_bf16(n)), full(gpu(), random_bf16(n));
  DeviceBuffer<float> sum(gpu(), random_f32(n));
  std::vector<bf16> gathered(n);
  std::vector<float> summed(n);
  gpu().copy_to_device(Queue::h2d, src.get(), shard.data(), n * 2);
  comm->enqueue_all_gather(gpu(), Queue::h2d, src.get(), full.get(), n * 2);
  gpu().copy_to_host(Queue::h2d, gathered.data(), full.get(), n * 2);
  const auto gathered_event = gpu().create_event();
  gpu().record(*gathered_event, Queue::h2d);
  gpu().queue_wait(Queue::d2h, *gathered_event);
  comm->enqueue_reduce_scatter(gpu(), Queue::d2h, full.get(), ElemType::bf16, sum.get(), n);
  gpu().copy_to_host(Queue::d2h, summed.data(), sum.get(), n * 4);
  gpu().synchronize();
  EXPECT_EQ(std::memcmp(gathered.data(), shard.data(), n * 2), 0);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += summed[i] != bf16_to_f32(shard[i]) ? 1 : 0;
  EXPECT_EQ(wrong, 0u);
}

TEST(NcclCollectives, AbortMakesEveryLaterCallThrow) {
  ZOB_REQUIRE_NCCL();
  SingleRankCollectives host;
  auto comm = gpu().make_rank_collectives(host, {30.0, false});
  comm->abort("test abort");
  DeviceBuffer<bf16> buf(gpu(), 16);
  EXPECT_THROW(comm->all_gather(buf.get(), buf.get(), 32), CollectiveError);
  EXPECT_THROW(comm->broadcast(buf.get(), 32, 0), CollectiveError);
}
#endif

}  // namespace
}  // namespace zob::gpu_test
