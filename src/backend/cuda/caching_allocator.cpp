// CachingAllocator (see caching_allocator.h). Reuse is best fit among cached blocks no more
// than 1/4 larger than the request's size class, so a large cached block is not spent on a
// small request while the cache still cuts cudaMalloc calls to the first step of training.
#include "backend/cuda/caching_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace anvil::cuda {

size_t allocation_size_class(size_t bytes) {
  if (bytes <= kSmallAllocationLimit) {
    const size_t granules = std::max<size_t>(1, (bytes + kSmallGranule - 1) / kSmallGranule);
    return granules * kSmallGranule;
  }
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

CachingAllocator::~CachingAllocator() {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [ptr, size] : live_) source_.release(ptr);
  live_.clear();
  release_cached_locked();
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = allocation_size_class(bytes);
  const std::lock_guard<std::mutex> lock(mutex_);
  void* block = nullptr;
  size_t block_size = size;
  const auto fit = cached_.lower_bound(size);
  if (fit != cached_.end() && fit->first <= size + size / 4) {
    block = fit->second;
    block_size = fit->first;
    cached_.erase(fit);
    stats_.bytes_cached -= block_size;
    ++stats_.cache_hits;
  } else {
    block = source_.allocate(size);
    if (!block && !cached_.empty()) {
      release_cached_locked();
      block = source_.allocate(size);
    }
    ANVIL_CHECK(block != nullptr,
                "[cuda] out of device memory allocating {} bytes ({} in use, peak {})", size,
                stats_.bytes_in_use, stats_.peak_bytes_in_use);
    ++stats_.source_allocations;
  }
  live_.emplace(block, block_size);
  stats_.bytes_in_use += block_size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return block;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(ptr);
  ANVIL_CHECK(it != live_.end(), "[cuda] deallocate of a pointer the allocator does not own");
  cached_.emplace(it->second, ptr);
  stats_.bytes_in_use -= it->second;
  stats_.bytes_cached += it->second;
  live_.erase(it);
}

void CachingAllocator::release_cached() {
  const std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

AllocatorStats CachingAllocator::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::release_cached_locked() {
  for (const auto& [size, ptr] : cached_) source_.release(ptr);
  cached_.clear();
  stats_.bytes_cached = 0;
}

}  // namespace anvil::cuda
