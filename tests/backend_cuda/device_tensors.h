// Test helpers for the CUDA kernel tests: tensors on any backend made from float values
// (rounded to the dtype as core/dtype.h does), read back as floats or raw bytes, owned by a
// DeviceTensors set that frees them at the end of a test. Host-only; no CUDA header.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/dtype.h"

namespace anvil::test {

class DeviceTensors {
 public:
  explicit DeviceTensors(Backend& backend) : backend_(backend) {}

  // Returns an uninitialised tensor of `dtype` and `shape`, `offset` elements into its own
  // buffer (a view that starts mid-vector when offset % 8 != 0).
  Tensor empty(DType dtype, Shape shape, int64_t offset = 0) {
    const size_t bytes = static_cast<size_t>(shape.numel() + offset) * dtype_size(dtype);
    buffers_.push_back(std::make_unique<Buffer>(backend_, std::max<size_t>(bytes, 64),
                                                MemoryCategory::workspace));
    auto* base = static_cast<unsigned char*>(buffers_.back()->data());
    return Tensor(base + offset * static_cast<int64_t>(dtype_size(dtype)), dtype, shape,
                  backend_.device());
  }

  // Returns a tensor holding `values` rounded to `dtype` (f32, bf16, f16 or i32).
  Tensor make(DType dtype, Shape shape, const std::vector<float>& values, int64_t offset = 0) {
    const Tensor t = empty(dtype, shape, offset);
    std::vector<unsigned char> bytes(t.nbytes());
    for (size_t i = 0; i < values.size(); ++i) {
      switch (dtype) {
        case DType::bf16: store16(bytes, i, float_to_bf16(values[i])); break;
        case DType::f16: store16(bytes, i, float_to_f16(values[i])); break;
        case DType::i32: {
          const int32_t v = static_cast<int32_t>(values[i]);
          std::memcpy(&bytes[4 * i], &v, 4);
          break;
        }
        default: std::memcpy(&bytes[4 * i], &values[i], 4); break;
      }
    }
    if (t.nbytes() > 0) backend_.copy_from_host(t, bytes.data());
    return t;
  }

  // Returns the tensor's raw bytes.
  std::vector<unsigned char> bytes(const Tensor& t) {
    std::vector<unsigned char> out(t.nbytes());
    if (t.nbytes() > 0) backend_.copy_to_host(out.data(), t);
    return out;
  }

  // Returns the tensor's values widened to float.
  std::vector<float> read(const Tensor& t) {
    const std::vector<unsigned char> raw = bytes(t);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h = 0;
      switch (t.dtype) {
        case DType::bf16: std::memcpy(&h, &raw[2 * i], 2); out[i] = bf16_to_float(h); break;
        case DType::f16: std::memcpy(&h, &raw[2 * i], 2); out[i] = f16_to_float(h); break;
        default: std::memcpy(&out[i], &raw[4 * i], 4); break;
      }
    }
    return out;
  }

 private:
  static void store16(std::vector<unsigned char>& bytes, size_t i, uint16_t h) {
    std::memcpy(&bytes[2 * i], &h, 2);
  }

  Backend& backend_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// Returns `count` deterministic values in [lo, hi).
inline std::vector<float> wave(int64_t count, int seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const double s = std::sin(0.7311 * static_cast<double>(i) + 1.37 * seed);
    out[i] = static_cast<float>(lo + (hi - lo) * 0.5 * (s + 1.0) * 0.999);
  }
  return out;
}

// Returns max |got - want| / max |want| (the conformance suite's peak-relative error);
// infinity when a value is not finite or the sizes differ.
inline double peak_relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double peak = 0.0, error = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) return INFINITY;
    peak = std::max(peak, std::fabs(static_cast<double>(want[i])));
    error = std::max(error, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return peak > 0.0 ? error / peak : error;
}

}  // namespace anvil::test
