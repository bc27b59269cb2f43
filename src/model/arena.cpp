// Arena carving: bump allocation with fixed alignment inside one Buffer.
#include "model/arena.h"

namespace anvil {

Tensor Arena::take(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const size_t begin = offset_;
  offset_ = (begin + bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (measuring_) return Tensor(nullptr, dtype, shape, buffer_.device());
  return Tensor(static_cast<char*>(buffer_.data()) + begin, dtype, shape, buffer_.device());
}

}  // namespace anvil
