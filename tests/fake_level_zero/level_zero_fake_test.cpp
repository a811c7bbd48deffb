// The fake driver itself, through the real loader and the plain Level Zero API: a list
// completes its commands out of order unless a barrier orders them (as the specification
// allows), and the happens-before check reports two unordered commands on one list. Without
// these, a backend that relies on a list running in order could pass every other test.
#include <gtest/gtest.h>
#include <level_zero/ze_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "test_support.hpp"

namespace zob {
namespace {

using test::ScopedEnv;

#define ZE_OK(call) ASSERT_EQ((call), ZE_RESULT_SUCCESS) << #call

// One context, one immediate compute list, a pool of timestamp events, one device buffer.
class LevelZeroFakeList : public ::testing::Test {
 protected:
  void SetUp() override {
    ZE_OK(zeInit(ZE_INIT_FLAG_GPU_ONLY));
    std::uint32_t n = 1;
    ZE_OK(zeDriverGet(&n, &driver_));
    n = 1;
    ZE_OK(zeDeviceGet(driver_, &n, &device_));
    ze_context_desc_t cdesc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
    ZE_OK(zeContextCreate(driver_, &cdesc, &context_));
    ze_command_queue_desc_t qdesc{
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 0, 0, 0, ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
        ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ZE_OK(zeCommandListCreateImmediate(context_, device_, &qdesc, &list_));
    ze_event_pool_desc_t pdesc{
        ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
        ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP, kEvents};
    ZE_OK(zeEventPoolCreate(context_, &pdesc, 1, &device_, &pool_));
    for (std::uint32_t i = 0; i < kEvents; ++i) {
      ze_event_desc_t edesc{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, i, ZE_EVENT_SCOPE_FLAG_HOST,
                            ZE_EVENT_SCOPE_FLAG_HOST};
      ZE_OK(zeEventCreate(pool_, &edesc, &events_[i]));
    }
    ze_device_mem_alloc_desc_t mdesc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    ZE_OK(zeMemAllocDevice(context_, &mdesc, kBytes, 256, device_, &buffer_));
  }
  void TearDown() override {  // after a lost context some of these fail: not checked
    if (list_ != nullptr) zeCommandListDestroy(list_);
    if (buffer_ != nullptr) zeMemFree(context_, buffer_);
    for (auto* e : events_)
      if (e != nullptr) zeEventDestroy(e);
    if (pool_ != nullptr) zeEventPoolDestroy(pool_);
    if (context_ != nullptr) zeContextDestroy(context_);
  }
  unsigned char* at(std::size_t offset) const {
    return static_cast<unsigned char*>(buffer_) + offset;
  }

  static constexpr std::uint32_t kEvents = 12;
  static constexpr std::size_t kBytes = 4096;
  ze_driver_handle_t driver_ = nullptr;
  ze_device_handle_t device_ = nullptr;
  ze_context_handle_t context_ = nullptr;
  ze_command_list_handle_t list_ = nullptr;
  ze_event_pool_handle_t pool_ = nullptr;
  ze_event_handle_t events_[kEvents] = {};
  void* buffer_ = nullptr;
};

// The fake's test hook: while held, no list starts a command.
void hold_lists(ze_driver_handle_t driver, int on) {
  void* fn = nullptr;
  ASSERT_EQ(zeDriverGetExtensionFunctionAddress(driver, "fakeZeHoldLists", &fn), ZE_RESULT_SUCCESS);
  reinterpret_cast<void (*)(int)>(fn)(on);
}

// Nine copies to disjoint bytes, each signaling its own event, appended before any starts:
// on the deterministic clock their end times say in which order they completed, and some
// later copy completes before an earlier one. A barrier completes them all before it.
TEST_F(LevelZeroFakeList, CompletesOutOfOrderUnlessABarrierOrdersIt) {
  ScopedEnv ticks("FAKE_ZE_TICKS_PER_COMMAND", "10");
  constexpr int kCopies = 9;
  ze_event_handle_t done = events_[kEvents - 1];
  std::vector<std::uint32_t> src(kCopies, 7);
  hold_lists(driver_, 1);
  for (int i = 0; i < kCopies; ++i)
    ZE_OK(zeCommandListAppendMemoryCopy(list_, at(64 * i), &src[i], 4, events_[i], 0, nullptr));
  ZE_OK(zeCommandListAppendBarrier(list_, done, 0, nullptr));
  hold_lists(driver_, 0);
  ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
  std::vector<std::uint64_t> ends;
  for (int i = 0; i <= kCopies; ++i) {
    ze_kernel_timestamp_result_t ts{};
    ZE_OK(zeEventQueryKernelTimestamp(i < kCopies ? events_[i] : done, &ts));
    ends.push_back(ts.global.kernelEnd);
  }
  bool out_of_order = false;
  for (int i = 1; i < kCopies; ++i) out_of_order |= ends[i] < ends[i - 1];
  const char* seed = std::getenv("FAKE_ZE_SEED");
  EXPECT_TRUE(out_of_order) << "every copy completed in append order (FAKE_ZE_SEED "
                            << (seed != nullptr ? seed : "1") << ")";
  for (int i = 0; i < kCopies; ++i) EXPECT_LT(ends[i], ends[kCopies]) << "copy " << i;
}

// Two copies on one list writing the same bytes with nothing between them race, whichever
// ran first: the fake loses the context. With a barrier between them the second one wins.
TEST_F(LevelZeroFakeList, ReportsTwoUnorderedWritesOnOneList) {
  std::vector<unsigned char> a(256, 1), b(256, 2), back(256, 0);
  ze_event_handle_t done = events_[0];
  ZE_OK(zeCommandListAppendMemoryCopy(list_, at(0), a.data(), a.size(), nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendMemoryCopy(list_, at(128), b.data(), b.size(), nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendBarrier(list_, done, 0, nullptr));
  EXPECT_EQ(zeEventHostSynchronize(done, UINT64_MAX), ZE_RESULT_ERROR_DEVICE_LOST);
}

TEST_F(LevelZeroFakeList, ABarrierOrdersTwoWritesOnOneList) {
  std::vector<unsigned char> a(256, 1), b(256, 2), back(384, 0);
  ze_event_handle_t done = events_[0];
  ZE_OK(zeCommandListAppendMemoryCopy(list_, at(0), a.data(), a.size(), nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendBarrier(list_, nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendMemoryCopy(list_, at(128), b.data(), b.size(), nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendBarrier(list_, nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendMemoryCopy(list_, back.data(), at(0), back.size(), nullptr, 0, nullptr));
  ZE_OK(zeCommandListAppendBarrier(list_, done, 0, nullptr));
  ZE_OK(zeEventHostSynchronize(done, UINT64_MAX));
  for (std::size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], i < 128 ? 1 : 2) << i;
}

long fake_copy_only_lists(ze_driver_handle_t driver) {
  void* fn = nullptr;
  if (zeDriverGetExtensionFunctionAddress(driver, "fakeZeCopyOnlyLists", &fn) != ZE_RESULT_SUCCESS)
    return -1;
  return reinterpret_cast<long (*)()>(fn)();
}

// With two queues in the copy-only group the backend gives device-to-host copies their own
// list (level_zero_device.cpp, create_lists): h2d and d2h then run on two engines, ordered only
// by the events the step records, as in TheCopyQueueWaitsForAKernelOnTheComputeQueue.
TEST_F(LevelZeroFakeList, TwoCopyEnginesGiveDeviceToHostItsOwnList) {
  for (const char* engines : {"1", "2"}) {
    ScopedEnv copy_engines("FAKE_ZE_COPY_ENGINES", engines);
    LevelZeroDevice dev(0);
    EXPECT_EQ(fake_copy_only_lists(driver_), engines[0] == '2' ? 2 : 1) << engines;
    std::vector<unsigned char> src(5000), back(5000, 0);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
    void* d = dev.allocate(src.size());
    auto uploaded = dev.create_event();
    dev.copy_to_device(Queue::h2d, d, src.data(), src.size());
    dev.record(*uploaded, Queue::h2d);
    dev.queue_wait(Queue::d2h, *uploaded);
    dev.copy_to_host(Queue::d2h, back.data(), d, back.size());
    dev.synchronize();
    EXPECT_TRUE(back == src) << "bytes differ with " << engines << " copy engine(s)";
    dev.deallocate(d);
  }
}

}  // namespace
}  // namespace zob
