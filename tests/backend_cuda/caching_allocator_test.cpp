// CachingAllocator's policy, tested on the host with a fake memory source: size classes,
// reuse without new source allocations, peak/in-use/cached statistics, the release-and-retry
// path when the source runs out, and the return of every block on destruction.
#include "backend/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "core/error.h"

namespace anvil::cuda {
namespace {

// Host memory with a byte budget, recording what is outstanding.
class FakeSource final : public DeviceMemorySource {
 public:
  explicit FakeSource(size_t budget) : budget_(budget) {}
  void* allocate(size_t bytes) override {
    if (used_ + bytes > budget_) return nullptr;
    void* ptr = std::aligned_alloc(256, bytes);
    used_ += bytes;
    sizes_[ptr] = bytes;
    return ptr;
  }
  void release(void* ptr) override {
    used_ -= sizes_.at(ptr);
    sizes_.erase(ptr);
    std::free(ptr);
  }
  size_t used() const { return used_; }
  size_t outstanding() const { return sizes_.size(); }

 private:
  size_t budget_;
  size_t used_ = 0;
  std::map<void*, size_t> sizes_;
};

constexpr size_t kMiB = size_t{1} << 20;

TEST(CachingAllocator, RoundsSmallRequestsTo512AndLargeTo2MiB) {
  EXPECT_EQ(allocation_size_class(0), 512u);
  EXPECT_EQ(allocation_size_class(1), 512u);
  EXPECT_EQ(allocation_size_class(512), 512u);
  EXPECT_EQ(allocation_size_class(513), 1024u);
  EXPECT_EQ(allocation_size_class(kMiB), kMiB);
  EXPECT_EQ(allocation_size_class(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(allocation_size_class(2 * kMiB + 1), 4 * kMiB);
  EXPECT_EQ(allocation_size_class(37 * kMiB), 38 * kMiB);
}

TEST(CachingAllocator, ReusesFreedBlocksWithoutNewSourceAllocations) {
  FakeSource source(64 * kMiB);
  CachingAllocator allocator(source);
  void* first = allocator.allocate(1000);
  allocator.deallocate(first);
  void* second = allocator.allocate(900);  // same 1024-byte class
  EXPECT_EQ(second, first);
  const AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.source_allocations, 1);
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.bytes_in_use, 1024u);
  EXPECT_EQ(stats.bytes_cached, 0u);
  allocator.deallocate(second);
}

TEST(CachingAllocator, DoesNotSpendAMuchLargerCachedBlockOnASmallRequest) {
  FakeSource source(64 * kMiB);
  CachingAllocator allocator(source);
  void* big = allocator.allocate(8 * kMiB);
  allocator.deallocate(big);
  void* small = allocator.allocate(4096);
  EXPECT_NE(small, big);
  EXPECT_EQ(allocator.stats().source_allocations, 2);
  EXPECT_EQ(allocator.stats().bytes_cached, 8 * kMiB);
  allocator.deallocate(small);
}

TEST(CachingAllocator, TracksInUsePeakAndCachedBytes) {
  FakeSource source(64 * kMiB);
  CachingAllocator allocator(source);
  void* a = allocator.allocate(3 * kMiB);  // 4 MiB class
  void* b = allocator.allocate(100);       // 512
  EXPECT_EQ(allocator.stats().bytes_in_use, 4 * kMiB + 512);
  allocator.deallocate(a);
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.bytes_in_use, 512u);
  EXPECT_EQ(stats.peak_bytes_in_use, 4 * kMiB + 512);
  EXPECT_EQ(stats.bytes_cached, 4 * kMiB);
  allocator.release_cached();
  stats = allocator.stats();
  EXPECT_EQ(stats.bytes_cached, 0u);
  EXPECT_EQ(source.used(), 512u);
  allocator.deallocate(b);
}

TEST(CachingAllocator, ReleasesTheCacheAndRetriesWhenTheSourceIsFull) {
  FakeSource source(10 * kMiB);
  CachingAllocator allocator(source);
  void* a = allocator.allocate(6 * kMiB);
  allocator.deallocate(a);  // 6 MiB cached; 4 MiB left in the source
  void* b = allocator.allocate(9 * kMiB);  // 10 MiB class: fits only after the cache goes
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(allocator.stats().bytes_cached, 0u);
  EXPECT_EQ(source.used(), 10 * kMiB);
  try {
    allocator.allocate(kMiB);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[cuda] out of device memory"), std::string::npos)
        << e.what();
  }
  allocator.deallocate(b);
}

TEST(CachingAllocator, RejectsForeignPointersAndReturnsEverythingOnDestruction) {
  FakeSource source(64 * kMiB);
  {
    CachingAllocator allocator(source);
    int local = 0;
    EXPECT_THROW(allocator.deallocate(&local), Error);
    allocator.deallocate(allocator.allocate(5000));
    (void)allocator.allocate(3 * kMiB);  // still live when the allocator dies
    EXPECT_EQ(source.outstanding(), 2u);
  }
  EXPECT_EQ(source.outstanding(), 0u);
  EXPECT_EQ(source.used(), 0u);
}

}  // namespace
}  // namespace anvil::cuda
