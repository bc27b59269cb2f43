// Allocator and Buffer. Core knows nothing about backends: a backend is an Allocator, and a
// Buffer is the RAII owner of one allocation from it. Parameters, gradients and optimizer
// state live in a few large Buffers (one per layer) with Tensor views into them, which is
// what makes sharding a matter of slicing flat memory.
// Every allocation names its MemoryCategory and is counted by the allocator it comes from
// (the requested bytes, not any rounding the allocator adds): allocate() and deallocate() are
// not virtual and count around the backend's do_allocate / do_deallocate, so no backend can
// leave an allocation out of its memory_snapshot().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/memory_category.h"
#include "core/memory_counters.h"
#include "core/tensor.h"

namespace anvil {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `bytes` of device memory aligned to at least 64 bytes, counted under `category`;
  // throws on failure (and counts nothing).
  void* allocate(size_t bytes, MemoryCategory category);
  // Frees an allocation of `bytes` that allocate() made under `category`.
  void deallocate(void* ptr, size_t bytes, MemoryCategory category);
  virtual Device device() const = 0;
  // Returns the bytes this allocator holds now and has held at most, by category.
  MemorySnapshot memory_snapshot() const { return counters_.snapshot(); }
  // Restarts the peaks of memory_snapshot() from the bytes held now.
  void reset_memory_peaks() { counters_.reset_peaks(); }
  // Returns how many allocations this allocator has made (a steady training step makes none).
  int64_t allocation_count() const { return allocations_.load(std::memory_order_relaxed); }

 protected:
  // The backend's own allocation and release, called only by allocate() and deallocate().
  virtual void* do_allocate(size_t bytes) = 0;
  virtual void do_deallocate(void* ptr, size_t bytes) = 0;

 private:
  MemoryCounters counters_;
  std::atomic<int64_t> allocations_{0};
};

class Buffer {
 public:
  Buffer() = default;
  // Allocates `bytes` from `allocator`, counted under `category`.
  Buffer(Allocator& allocator, size_t bytes, MemoryCategory category);
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemoryCategory category() const { return category_; }
  Device device() const { return allocator_ ? allocator_->device() : Device{}; }
  // Returns a tensor view over the start of the buffer.
  Tensor as(DType dtype, Shape shape) const;
  // Frees the allocation (no-op when empty).
  void reset();

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryCategory category_ = MemoryCategory::workspace;
};

// Returns `bytes` of host memory aligned to 64 bytes (uncounted: the counting is the
// Allocator's); throws when the host is out of memory. Release with free_host_memory.
void* allocate_host_memory(size_t bytes);
void free_host_memory(void* ptr);

// Host memory with 64-byte alignment for host-side staging that is not any backend's memory
// (a communicator's staging when no backend lends it an allocator). Its instance counts what
// it holds in its own snapshot, apart from every backend's: the CPU backends allocate host
// memory themselves (allocate_host_memory) and count it as their device memory.
class HostAllocator final : public Allocator {
 public:
  Device device() const override { return {}; }
  // Returns the process-wide instance.
  static HostAllocator& instance();

 protected:
  void* do_allocate(size_t bytes) override { return allocate_host_memory(bytes); }
  void do_deallocate(void* ptr, size_t) override { free_host_memory(ptr); }
};

}  // namespace anvil
