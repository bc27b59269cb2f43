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

// Adds one row into the running totals; each element sees the additions in rank order.
template <typename T, typename Accumulate>
void add_row(const void* row, int64_t count, T* totals, Accumulate add) {
  const T* values = static_cast<const T*>(row);
  for (int64_t i = 0; i < count; ++i) totals[i] = add(totals[i], values[i]);
}

template <typename ToFloat>
void add_half_row(const void* row, int64_t count, float* totals, bool first, ToFloat to_float) {
  const uint16_t* values = static_cast<const uint16_t*>(row);
  if (first) {
    for (int64_t i = 0; i < count; ++i) totals[i] = to_float(values[i]);
  } else {
    for (int64_t i = 0; i < count; ++i) totals[i] += to_float(values[i]);
  }
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

RankOrderSum::RankOrderSum(DType dtype, int64_t count, void* out, Allocator& staging)
    : dtype_(dtype), count_(count), out_(out) {
  ANVIL_CHECK(count >= 0, "[comm] ordered sum of {} elements", count);
  if (dtype == DType::bf16 || dtype == DType::f16) {
    totals_ = Buffer(staging, static_cast<size_t>(count) * sizeof(float),
                     MemoryCategory::communication);
  }
}

void RankOrderSum::add(const void* contribution) {
  const bool first = added_++ == 0;
  if (count_ == 0) return;
  if (first && dtype_size(dtype_) != 2) {
    if (contribution != out_)
      std::memcpy(out_, contribution, static_cast<size_t>(count_) * dtype_size(dtype_));
    return;
  }
  switch (dtype_) {
    case DType::f32:
      add_row<float>(contribution, count_, static_cast<float*>(out_),
                     [](float a, float b) { return a + b; });
      return;
    case DType::i32:
    case DType::u32:
      // Unsigned arithmetic wraps without undefined behaviour and has i32's bit pattern.
      add_row<uint32_t>(contribution, count_, static_cast<uint32_t*>(out_),
                        [](uint32_t a, uint32_t b) { return a + b; });
      return;
    case DType::u16:
      if (first) {
        std::memcpy(out_, contribution, static_cast<size_t>(count_) * 2);
        return;
      }
      add_row<uint16_t>(contribution, count_, static_cast<uint16_t*>(out_),
                        [](uint16_t a, uint16_t b) { return static_cast<uint16_t>(a + b); });
      return;
    case DType::bf16:
      add_half_row(contribution, count_, static_cast<float*>(totals_.data()), first,
                   bf16_to_float);
      return;
    case DType::f16:
      add_half_row(contribution, count_, static_cast<float*>(totals_.data()), first,
                   f16_to_float);
      return;
  }
  ANVIL_FAIL("[comm] ordered sum: unsupported dtype {}", dtype_name(dtype_));
}

void RankOrderSum::finish() {
  if (count_ == 0) return;
  // Which NaN an addition returns depends on the CPU and on the operand order the compiler
  // picked, and a device's adds return one NaN of their own: every NaN total becomes the
  // canonical quiet NaN, so the bits are the same on any host and on the device kernels.
  if (dtype_ == DType::f32) {
    float* result = static_cast<float*>(out_);
    for (int64_t i = 0; i < count_; ++i)
      if (std::isnan(result[i])) result[i] = bits_float(kCanonicalNanF32);
    return;
  }
  if (totals_.data() == nullptr) return;
  const float* totals = static_cast<const float*>(totals_.data());
  uint16_t* result = static_cast<uint16_t*>(out_);
  const bool bf16 = dtype_ == DType::bf16;
  const auto round = bf16 ? float_to_bf16 : float_to_f16;
  const uint16_t nan = bf16 ? kCanonicalNanBf16 : kCanonicalNanF16;
  for (int64_t i = 0; i < count_; ++i)
    result[i] = std::isnan(totals[i]) ? nan : round(totals[i]);
}

void sum_in_rank_order(const void* contributions, int ranks, int64_t count, DType dtype,
                       void* out) {
  ANVIL_CHECK(ranks >= 1 && count >= 0, "[comm] ordered sum of {} rows of {} elements", ranks,
              count);
  RankOrderSum sum(dtype, count, out, HostAllocator::instance());
  const size_t row_bytes = static_cast<size_t>(count) * dtype_size(dtype);
  for (int r = 0; r < ranks; ++r) sum.add(static_cast<const char*>(contributions) + r * row_bytes);
  sum.finish();
}

void max_into(const void* in, void* inout, int64_t count, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      const float* a = static_cast<const float*>(in);
      float* b = static_cast<float*>(inout);
      for (int64_t i = 0; i < count; ++i) {
        const uint32_t bits = float_max_bits<uint32_t>(a[i], b[i], float_bits(a[i]),
                                                       float_bits(b[i]), kCanonicalNanF32);
        b[i] = bits_float(bits);
      }
      return;
    }
    case DType::i32: max_integers<int32_t>(in, inout, count); return;
    case DType::u32: max_integers<uint32_t>(in, inout, count); return;
    case DType::u16: max_integers<uint16_t>(in, inout, count); return;
    case DType::bf16: max_halves(in, inout, count, bf16_to_float, kCanonicalNanBf16); return;
    case DType::f16: max_halves(in, inout, count, f16_to_float, kCanonicalNanF16); return;
  }
  ANVIL_FAIL("[comm] max: unsupported dtype {}", dtype_name(dtype));
}

}  // namespace anvil
