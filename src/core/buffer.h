// Allocator and Buffer. Core knows nothing about backends: a backend is an Allocator, and a
// Buffer is the RAII owner of one allocation from it. Parameters, gradients and optimizer
// state live in a few large Buffers (one per layer) with Tensor views into them, which is
// what makes sharding a matter of slicing flat memory.
#pragma once

#include <cstddef>
#include <utility>

#include "core/tensor.h"

namespace anvil {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `bytes` of device memory aligned to at least 64 bytes; throws on failure.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& allocator, size_t bytes);
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return allocator_ ? allocator_->device() : Device{}; }
  // Returns a tensor view over the start of the buffer.
  Tensor as(DType dtype, Shape shape) const;
  // Frees the allocation (no-op when empty).
  void reset();

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Host memory with 64-byte alignment; the allocator behind CPU backends and host staging.
class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return {}; }
  // Returns the process-wide instance.
  static HostAllocator& instance();
};

}  // namespace anvil
