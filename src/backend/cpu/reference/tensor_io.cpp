// Dtype conversion for the reference ops (see tensor_io.h).
#include "backend/cpu/reference/tensor_io.h"

#include "core/error.h"

namespace anvil::cpu_ref {

float load_float(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::f32: return static_cast<const float*>(t.data)[i];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(t.data)[i]);
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(t.data)[i]);
    default: break;
  }
  ANVIL_FAIL("[cpu] cannot read {} elements as floats", dtype_name(t.dtype));
}

void store_float(const Tensor& t, int64_t i, float value) {
  switch (t.dtype) {
    case DType::f32: static_cast<float*>(t.data)[i] = value; return;
    case DType::bf16: static_cast<uint16_t*>(t.data)[i] = float_to_bf16(value); return;
    case DType::f16: static_cast<uint16_t*>(t.data)[i] = float_to_f16(value); return;
    default: break;
  }
  ANVIL_FAIL("[cpu] cannot store floats into {} elements", dtype_name(t.dtype));
}

std::vector<float> read_floats(const Tensor& t, int64_t offset, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[i] = load_float(t, offset + i);
  return values;
}

std::vector<float> read_floats(const Tensor& t) { return read_floats(t, 0, t.numel()); }

void write_floats(const Tensor& t, int64_t offset, int64_t count, const float* values) {
  for (int64_t i = 0; i < count; ++i) store_float(t, offset + i, values[i]);
}

void write_floats(const Tensor& t, const std::vector<float>& values) {
  ANVIL_CHECK(static_cast<int64_t>(values.size()) == t.numel(),
              "[cpu] writing {} values into a tensor of {} elements", values.size(), t.numel());
  write_floats(t, 0, t.numel(), values.data());
}

}  // namespace anvil::cpu_ref
