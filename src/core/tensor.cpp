// Tensor view arithmetic.
#include "core/tensor.h"

namespace anvil {

Tensor Tensor::view(Shape new_shape) const {
  ANVIL_CHECK(new_shape.numel() == numel(), "[tensor] cannot view {} as {}", shape.str(),
              new_shape.str());
  return Tensor(data, dtype, new_shape, device);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  ANVIL_CHECK(shape.rank() >= 1 && 0 <= begin && begin <= end && end <= shape[0],
              "[tensor] slice [{}, {}) out of range for {}", begin, end, shape.str());
  Shape s = shape;
  s[0] = end - begin;
  const size_t row_bytes = shape[0] ? nbytes() / static_cast<size_t>(shape[0]) : 0;
  return Tensor(static_cast<char*>(data) + begin * row_bytes, dtype, s, device);
}

Tensor Tensor::operator[](int64_t i) const {
  ANVIL_CHECK(shape.rank() >= 1 && 0 <= i && i < shape[0], "[tensor] index {} out of range for {}",
              i, shape.str());
  Shape s;
  if (shape.rank() == 2) s = Shape{shape[1]};
  else if (shape.rank() == 3) s = Shape{shape[1], shape[2]};
  else if (shape.rank() == 4) s = Shape{shape[1], shape[2], shape[3]};
  const size_t row_bytes = nbytes() / static_cast<size_t>(shape[0]);
  return Tensor(static_cast<char*>(data) + i * row_bytes, dtype, s, device);
}

Tensor Tensor::flat(int64_t offset, int64_t count) const {
  ANVIL_CHECK(offset >= 0 && count >= 0 && offset + count <= numel(),
              "[tensor] flat range [{}, {}) out of range for {} elements", offset, offset + count,
              numel());
  return Tensor(static_cast<char*>(data) + offset * dtype_size(dtype), dtype, Shape{count},
                device);
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  ANVIL_CHECK(t.shape == expected, "[shape] {} has shape {}, expected {}", what, t.shape.str(),
              expected.str());
}

void check_dtype(const Tensor& t, DType expected, const char* what) {
  ANVIL_CHECK(t.dtype == expected, "[dtype] {} has dtype {}, expected {}", what,
              dtype_name(t.dtype), dtype_name(expected));
}

}  // namespace anvil
