// Host reduction kernels for the communicators. The ordered sum keeps one accumulator per
// element and adds the rows in rank order, so its rounding is that of the serial loop; the
// max compares values, never bit patterns, except to break the +0/-0 tie.
#include "comm/reduce_kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace anvil {
namespace {

// Adds row by row (not element by element) so the loops stream through memory and vectorise;
// each element still sees the additions in rank order.
template <typename T, typename Accumulate>
void sum_rows(const void* contributions, int ranks, int64_t count, void* out, Accumulate add) {
  const T* rows = static_cast<const T*>(contributions);
  T* result = static_cast<T*>(out);
  std::memcpy(result, rows, static_cast<size_t>(count) * sizeof(T));
  for (int r = 1; r < ranks; ++r) {
    const T* row = rows + static_cast<int64_t>(r) * count;
    for (int64_t i = 0; i < count; ++i) result[i] = add(result[i], row[i]);
  }
}

// Sums 16-bit floats through f32 accumulators, rounding each result once at the end.
template <typename ToFloat, typename FromFloat>
void sum_half_rows(const void* contributions, int ranks, int64_t count, void* out,
                   ToFloat to_float, FromFloat from_float) {
  const uint16_t* rows = static_cast<const uint16_t*>(contributions);
  std::vector<float> totals(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) totals[i] = to_float(rows[i]);
  for (int r = 1; r < ranks; ++r) {
    const uint16_t* row = rows + static_cast<int64_t>(r) * count;
    for (int64_t i = 0; i < count; ++i) totals[i] += to_float(row[i]);
  }
  uint16_t* result = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < count; ++i) result[i] = from_float(totals[i]);
}

// Returns the bit pattern of max(a, b) under the rules in the header.
template <typename Bits>
Bits float_max_bits(float a, float b, Bits a_bits, Bits b_bits, Bits quiet_nan) {
  if (std::isnan(a) || std::isnan(b)) return quiet_nan;
  if (a > b) return a_bits;
  if (b > a) return b_bits;
  return std::signbit(a) ? b_bits : a_bits;  // equal: only +0/-0 can differ in bits
}

template <typename T>
void max_integers(const void* in, void* inout, int64_t count) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int64_t i = 0; i < count; ++i)
    if (a[i] > b[i]) b[i] = a[i];
}

template <typename ToFloat>
void max_halves(const void* in, void* inout, int64_t count, ToFloat to_float, uint16_t nan) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int64_t i = 0; i < count; ++i)
    b[i] = float_max_bits<uint16_t>(to_float(a[i]), to_float(b[i]), a[i], b[i], nan);
}

}  // namespace

void sum_in_rank_order(const void* contributions, int ranks, int64_t count, DType dtype,
                       void* out) {
  ANVIL_CHECK(ranks >= 1 && count >= 0, "[comm] ordered sum of {} rows of {} elements", ranks,
              count);
  if (count == 0) return;
  switch (dtype) {
    case DType::f32:
      sum_rows<float>(contributions, ranks, count, out, [](float a, float b) { return a + b; });
      return;
    case DType::i32:
    case DType::u32:
      // Unsigned arithmetic wraps without undefined behaviour and has i32's bit pattern.
      sum_rows<uint32_t>(contributions, ranks, count, out,
                         [](uint32_t a, uint32_t b) { return a + b; });
      return;
    case DType::u16:
      sum_rows<uint16_t>(contributions, ranks, count, out,
                         [](uint16_t a, uint16_t b) { return static_cast<uint16_t>(a + b); });
      return;
    case DType::bf16:
      sum_half_rows(contributions, ranks, count, out, bf16_to_float, float_to_bf16);
      return;
    case DType::f16:
      sum_half_rows(contributions, ranks, count, out, f16_to_float, float_to_f16);
      return;
  }
  ANVIL_FAIL("[comm] ordered sum: unsupported dtype {}", dtype_name(dtype));
}

void max_into(const void* in, void* inout, int64_t count, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      const float* a = static_cast<const float*>(in);
      float* b = static_cast<float*>(inout);
      for (int64_t i = 0; i < count; ++i) {
        const uint32_t bits = float_max_bits<uint32_t>(a[i], b[i], float_bits(a[i]),
                                                       float_bits(b[i]), 0x7fc00000u);
        b[i] = bits_float(bits);
      }
      return;
    }
    case DType::i32: max_integers<int32_t>(in, inout, count); return;
    case DType::u32: max_integers<uint32_t>(in, inout, count); return;
    case DType::u16: max_integers<uint16_t>(in, inout, count); return;
    case DType::bf16: max_halves(in, inout, count, bf16_to_float, uint16_t{0x7fc0}); return;
    case DType::f16: max_halves(in, inout, count, f16_to_float, uint16_t{0x7e00}); return;
  }
  ANVIL_FAIL("[comm] max: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace anvil
