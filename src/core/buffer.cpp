// Buffer ownership and the aligned host allocator.
#include "core/buffer.h"

#include <cstdlib>
#include <new>

namespace anvil {

void* Allocator::allocate(size_t bytes, MemoryCategory category) {
  void* ptr = do_allocate(bytes);
  counters_.add(category, static_cast<int64_t>(bytes));
  allocations_.fetch_add(1, std::memory_order_relaxed);
  return ptr;
}

void Allocator::deallocate(void* ptr, size_t bytes, MemoryCategory category) {
  do_deallocate(ptr, bytes);
  counters_.subtract(category, static_cast<int64_t>(bytes));
}

Buffer::Buffer(Allocator& allocator, size_t bytes, MemoryCategory category)
    : allocator_(&allocator), bytes_(bytes), category_(category) {
  data_ = allocator.allocate(bytes, category);
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    category_ = other.category_;
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
  if (data_) allocator_->deallocate(data_, bytes_, category_);
  data_ = nullptr;
  bytes_ = 0;
}

void* allocate_host_memory(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  ANVIL_CHECK(p != nullptr, "[memory] out of host memory allocating {} bytes", bytes);
  return p;
}

void free_host_memory(void* ptr) { std::free(ptr); }

HostAllocator& HostAllocator::instance() {
  static HostAllocator allocator;
  return allocator;
}

}  // namespace anvil
