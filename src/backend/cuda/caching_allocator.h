// A caching allocator over a raw device-memory source (cudaMalloc in the backend, plain host
// memory in tests). Freed blocks go to a cache keyed by size class and are handed out again
// instead of calling cudaMalloc/cudaFree, which synchronize the device. Invariants: every block
// is either live (handed out) or cached, never both; a cached block is reused only for a
// request of its own size class or slightly smaller (at most 1/4 waste); when the source runs
// out of memory the cache is released and the request retried once before throwing. All
// blocks, live or cached, go back to the source when the allocator is destroyed. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

namespace anvil::cuda {

// Where the caching allocator gets memory from.
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  // Returns `bytes` of memory (256-byte aligned), or nullptr when out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
};

struct AllocatorStats {
  size_t bytes_in_use = 0;       // sum of live blocks' (size-class) sizes
  size_t peak_bytes_in_use = 0;  // high-water mark of bytes_in_use
  size_t bytes_cached = 0;       // freed blocks held for reuse
  int64_t source_allocations = 0;  // calls that reached the source (cudaMalloc)
  int64_t cache_hits = 0;          // requests served from the cache
};

// Small requests round up to a multiple of 512 bytes, large ones (over 1 MiB) to 2 MiB.
inline constexpr size_t kSmallAllocationLimit = size_t{1} << 20;
inline constexpr size_t kSmallGranule = 512;
inline constexpr size_t kLargeGranule = size_t{2} << 20;

// Returns the size class a request of `bytes` is rounded up to (zero bytes gets one granule).
size_t allocation_size_class(size_t bytes);

class CachingAllocator {
 public:
  explicit CachingAllocator(DeviceMemorySource& source) : source_(source) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns a block of at least `bytes`; throws anvil::Error when the source is exhausted.
  void* allocate(size_t bytes);
  // Returns a block to the cache; throws for a pointer this allocator did not hand out.
  void deallocate(void* ptr);
  // Gives every cached block back to the source.
  void release_cached();
  // Returns the current counters.
  AllocatorStats stats() const;

 private:
  void release_cached_locked();

  DeviceMemorySource& source_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> cached_;        // size -> block
  std::unordered_map<void*, size_t> live_;     // block -> size
  AllocatorStats stats_;
};

}  // namespace anvil::cuda
