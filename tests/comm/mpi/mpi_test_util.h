// Helpers for the multi-process tests: every rank can compute any rank's input from
// (rank, index), so each rank checks its own result against a serial computation.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace anvil::testing_mpi {

// Returns a float with a random sign, mantissa and exponent in [2^-12, 2^12): sums of such
// values round differently in different orders, which is what the determinism tests need.
inline float wide_value(int rank, int64_t index, uint64_t salt = 0) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(index) ^
               (salt * 0x9e3779b97f4a7c15ull);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  const float mantissa = 1.0f + static_cast<float>(x & 0xffffff) / 16777216.0f;
  const int exponent = static_cast<int>((x >> 24) % 25) - 12;
  return ((x >> 40) & 1 ? -1.0f : 1.0f) * std::ldexp(mantissa, exponent);
}

// Returns a small integer-valued float, so that sums are exact in any order.
inline float exact_value(int rank, int64_t index) {
  return static_cast<float>((rank + 1) * static_cast<int>(index % 13) - 17);
}

inline Tensor f32_tensor(std::vector<float>& values) {
  return Tensor(values.data(), DType::f32, Shape{static_cast<int64_t>(values.size())});
}

inline Tensor u16_tensor(std::vector<uint16_t>& values, DType dtype) {
  return Tensor(values.data(), dtype, Shape{static_cast<int64_t>(values.size())});
}

inline uint32_t bits(float value) { return std::bit_cast<uint32_t>(value); }

}  // namespace anvil::testing_mpi
