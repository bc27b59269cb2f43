// Buffer ownership and the aligned host allocator.
#include "core/buffer.h"

#include <cstdlib>
#include <new>

namespace anvil {

Buffer::Buffer(Allocator& allocator, size_t bytes) : allocator_(&allocator), bytes_(bytes) {
  data_ = allocator.allocate(bytes);
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Tensor Buffer::as(DType dtype, Shape shape) const {
  ANVIL_CHECK(shape.numel() * dtype_size(dtype) <= bytes_,
              "[buffer] view of {} {} needs {} bytes, buffer has {}", dtype_name(dtype),
              shape.str(), shape.numel() * dtype_size(dtype), bytes_);
  return Tensor(data_, dtype, shape, device());
}

void Buffer::reset() {
  if (data_) allocator_->deallocate(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

void* HostAllocator::allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  ANVIL_CHECK(p != nullptr, "[memory] out of host memory allocating {} bytes", bytes);
  return p;
}

void HostAllocator::deallocate(void* ptr, size_t) { std::free(ptr); }

HostAllocator& HostAllocator::instance() {
  static HostAllocator allocator;
  return allocator;
}

}  // namespace anvil
