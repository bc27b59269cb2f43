// MemoryCounters and the counting Allocator: current and peak per category, the total's own
// peak (not the sum of the category peaks), releases, peak resets, Buffer's RAII (moves
// included) and concurrent allocation from several threads.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/buffer.h"
#include "core/memory_counters.h"

namespace anvil {
namespace {

constexpr MemoryCategory kWeights = MemoryCategory::trainable_weights;
constexpr MemoryCategory kActivations = MemoryCategory::activations;
constexpr MemoryCategory kComm = MemoryCategory::communication;

// Host memory through the counting Allocator interface, counting its own calls.
class TestAllocator final : public Allocator {
 public:
  Device device() const override { return {}; }
  int live = 0;

 protected:
  void* do_allocate(size_t bytes) override {
    ++live;
    return allocate_host_memory(bytes);
  }
  void do_deallocate(void* ptr, size_t) override {
    --live;
    free_host_memory(ptr);
  }
};

TEST(MemoryCounters, CategoriesAreCountedApart) {
  MemoryCounters counters;
  counters.add(kWeights, 100);
  counters.add(kActivations, 30);
  counters.add(kWeights, 20);
  const MemorySnapshot s = counters.snapshot();
  EXPECT_EQ(s.current_of(kWeights), 120);
  EXPECT_EQ(s.current_of(kActivations), 30);
  EXPECT_EQ(s.current_of(kComm), 0);
  EXPECT_EQ(s.total, 150);
  EXPECT_EQ(s.total_peak, 150);
}

TEST(MemoryCounters, TheTotalPeakIsTheMostHeldAtOnce) {
  MemoryCounters counters;
  counters.add(kWeights, 100);
  counters.add(kActivations, 50);  // total 150
  counters.subtract(kActivations, 50);
  counters.add(kComm, 80);  // total 180
  counters.subtract(kComm, 80);
  counters.add(kActivations, 10);  // total 110
  const MemorySnapshot s = counters.snapshot();
  EXPECT_EQ(s.current_of(kActivations), 10);
  EXPECT_EQ(s.peak_of(kActivations), 50);
  EXPECT_EQ(s.current_of(kComm), 0);
  EXPECT_EQ(s.peak_of(kComm), 80);
  EXPECT_EQ(s.total, 110);
  EXPECT_EQ(s.total_peak, 180);  // less than 100 + 50 + 80, the sum of the category peaks
}

TEST(MemoryCounters, ResetPeaksStartsFromWhatIsHeld) {
  MemoryCounters counters;
  counters.add(kWeights, 100);
  counters.add(kActivations, 60);
  counters.subtract(kActivations, 60);
  counters.reset_peaks();
  MemorySnapshot s = counters.snapshot();
  EXPECT_EQ(s.peak_of(kActivations), 0);
  EXPECT_EQ(s.peak_of(kWeights), 100);
  EXPECT_EQ(s.total_peak, 100);
  counters.add(kActivations, 5);
  s = counters.snapshot();
  EXPECT_EQ(s.peak_of(kActivations), 5);
  EXPECT_EQ(s.total_peak, 105);
}

TEST(MemoryCounters, ConcurrentAllocationsAddUp) {
  MemoryCounters counters;
  constexpr int kThreads = 4, kRounds = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counters] {
      for (int i = 0; i < kRounds; ++i) {
        counters.add(kActivations, 8);
        counters.add(kWeights, 1);
        counters.subtract(kActivations, 8);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const MemorySnapshot s = counters.snapshot();
  EXPECT_EQ(s.current_of(kActivations), 0);
  EXPECT_EQ(s.current_of(kWeights), kThreads * kRounds);
  EXPECT_EQ(s.total, kThreads * kRounds);
  EXPECT_LE(s.peak_of(kActivations), 8 * kThreads);
  EXPECT_GE(s.peak_of(kActivations), 8);
  EXPECT_GE(s.total_peak, s.total);
}

TEST(CountingAllocator, BuffersCountWhileTheyLive) {
  TestAllocator allocator;
  {
    Buffer weights(allocator, 1000, kWeights);
    Buffer comm(allocator, 24, kComm);
    EXPECT_EQ(weights.category(), kWeights);
    const MemorySnapshot s = allocator.memory_snapshot();
    EXPECT_EQ(s.current_of(kWeights), 1000);
    EXPECT_EQ(s.current_of(kComm), 24);
    EXPECT_EQ(s.total, 1024);
    EXPECT_EQ(allocator.live, 2);
    comm.reset();
    EXPECT_EQ(allocator.memory_snapshot().current_of(kComm), 0);
    EXPECT_EQ(allocator.live, 1);
  }
  const MemorySnapshot s = allocator.memory_snapshot();
  EXPECT_EQ(s.total, 0);
  EXPECT_EQ(s.peak_of(kWeights), 1000);
  EXPECT_EQ(s.total_peak, 1024);
  EXPECT_EQ(allocator.live, 0);
}

TEST(CountingAllocator, AMovedBufferIsCountedOnceAndKeepsItsCategory) {
  TestAllocator allocator;
  Buffer first(allocator, 64, kActivations);
  Buffer second = std::move(first);
  EXPECT_EQ(second.category(), kActivations);
  EXPECT_EQ(allocator.memory_snapshot().current_of(kActivations), 64);
  Buffer third(allocator, 32, kWeights);
  third = std::move(second);  // frees third's own 32 weight bytes
  MemorySnapshot s = allocator.memory_snapshot();
  EXPECT_EQ(s.current_of(kWeights), 0);
  EXPECT_EQ(s.current_of(kActivations), 64);
  third.reset();
  s = allocator.memory_snapshot();
  EXPECT_EQ(s.total, 0);
  EXPECT_EQ(allocator.live, 0);
}

TEST(CountingAllocator, DirectCallsCountLikeBuffers) {
  TestAllocator allocator;
  void* p = allocator.allocate(4096, MemoryCategory::workspace);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(allocator.memory_snapshot().current_of(MemoryCategory::workspace), 4096);
  allocator.deallocate(p, 4096, MemoryCategory::workspace);
  EXPECT_EQ(allocator.memory_snapshot().total, 0);
  EXPECT_EQ(allocator.memory_snapshot().total_peak, 4096);
  allocator.reset_memory_peaks();
  EXPECT_EQ(allocator.memory_snapshot().total_peak, 0);
}

TEST(MemoryCategory, NamesFollowTheEnum) {
  EXPECT_EQ(memory_category_name(MemoryCategory::frozen_weights), "frozen_weights");
  EXPECT_EQ(memory_category_name(MemoryCategory::workspace), "workspace");
  EXPECT_EQ(kMemoryCategoryNames.size(), static_cast<size_t>(kMemoryCategoryCount));
}

}  // namespace
}  // namespace anvil
