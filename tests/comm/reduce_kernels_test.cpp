// The host reduction kernels: the ordered sum adds in rank order (so its rounding is the
// serial loop's, not a tree's), accumulates 16-bit floats in f32 with one rounding, and wraps
// integers, and returns the canonical NaN; the max is independent of argument order down to
// the bits; chunks tile a range.
#include <gtest/gtest.h>

#include <bit>
#include <climits>
#include <cmath>
#include <vector>

#include "comm/reduce_kernels.h"

namespace anvil {
namespace {

TEST(OrderedSum, AddsLeftToRightInRankOrder) {
  // Left to right: (1 + 1e8) rounds to 1e8, minus 1e8 is 0. Any other grouping keeps the 1.
  const std::vector<float> rows = {1.0f, 1e8f, -1e8f};
  float total = -1.0f;
  sum_in_rank_order(rows.data(), 3, 1, DType::f32, &total);
  EXPECT_EQ(total, 0.0f);

  const std::vector<float> reordered = {1e8f, -1e8f, 1.0f};
  sum_in_rank_order(reordered.data(), 3, 1, DType::f32, &total);
  EXPECT_EQ(total, 1.0f);
}

TEST(OrderedSum, MatchesTheSerialLoopOnManyRows) {
  const int ranks = 5;
  const int64_t count = 37;
  std::vector<float> rows(ranks * count);
  for (size_t i = 0; i < rows.size(); ++i)
    rows[i] = std::ldexp(static_cast<float>((i * 2654435761u) % 1000) - 500.0f,
                         static_cast<int>(i % 23) - 11);
  std::vector<float> totals(count);
  sum_in_rank_order(rows.data(), ranks, count, DType::f32, totals.data());
  for (int64_t i = 0; i < count; ++i) {
    float serial = rows[i];
    for (int r = 1; r < ranks; ++r) serial += rows[r * count + i];
    EXPECT_EQ(std::bit_cast<uint32_t>(totals[i]), std::bit_cast<uint32_t>(serial)) << i;
  }
}

TEST(OrderedSum, HalvesAccumulateInF32AndRoundOnce) {
  // bf16 spacing at 1 is 2^-7. Adding 2^-8 twice in bf16 would round back to 1 each time;
  // the f32 accumulator reaches 1 + 2^-7 exactly.
  const float tiny = std::ldexp(1.0f, -8);
  const std::vector<uint16_t> bf16_rows = {float_to_bf16(1.0f), float_to_bf16(tiny),
                                           float_to_bf16(tiny)};
  uint16_t bf16_total = 0;
  sum_in_rank_order(bf16_rows.data(), 3, 1, DType::bf16, &bf16_total);
  EXPECT_EQ(bf16_to_float(bf16_total), 1.0f + std::ldexp(1.0f, -7));

  const float f16_tiny = std::ldexp(1.0f, -11);  // f16 spacing at 1 is 2^-10
  const std::vector<uint16_t> f16_rows = {float_to_f16(1.0f), float_to_f16(f16_tiny),
                                          float_to_f16(f16_tiny)};
  uint16_t f16_total = 0;
  sum_in_rank_order(f16_rows.data(), 3, 1, DType::f16, &f16_total);
  EXPECT_EQ(f16_to_float(f16_total), 1.0f + std::ldexp(1.0f, -10));
}

TEST(OrderedSum, ANanTotalIsTheCanonicalQuietNan) {
  // Two rows of three: a NaN with a payload and a sign, a signalling NaN, inf + -inf (and the
  // same in 16 bits). Which NaN an add returns differs between CPUs and devices; the sum
  // always returns +qNaN.
  const float payload_nan = std::bit_cast<float>(0xffc12345u);
  const float signalling_nan = std::bit_cast<float>(0x7f800001u);
  const std::vector<float> rows = {payload_nan, 1.0f, INFINITY, 2.0f, signalling_nan, -INFINITY};
  std::vector<float> totals(3);
  sum_in_rank_order(rows.data(), 2, 3, DType::f32, totals.data());
  for (float total : totals) EXPECT_EQ(std::bit_cast<uint32_t>(total), kCanonicalNanF32);
  // One row: the sum is the row itself, but a NaN still comes out canonical.
  float single = 0.0f;
  sum_in_rank_order(&payload_nan, 1, 1, DType::f32, &single);
  EXPECT_EQ(std::bit_cast<uint32_t>(single), kCanonicalNanF32);

  const std::vector<uint16_t> bf16_rows = {0xffc5, 0x7f80, float_to_bf16(1.0f), 0xff80};
  std::vector<uint16_t> bf16_totals(2);
  sum_in_rank_order(bf16_rows.data(), 2, 2, DType::bf16, bf16_totals.data());
  EXPECT_EQ(bf16_totals, (std::vector<uint16_t>{kCanonicalNanBf16, kCanonicalNanBf16}));
  const std::vector<uint16_t> f16_rows = {0xfe01, 0x7c00, float_to_f16(1.0f), 0xfc00};
  std::vector<uint16_t> f16_totals(2);
  sum_in_rank_order(f16_rows.data(), 2, 2, DType::f16, f16_totals.data());
  EXPECT_EQ(f16_totals, (std::vector<uint16_t>{kCanonicalNanF16, kCanonicalNanF16}));
}

TEST(OrderedSum, IntegersWrapAround) {
  const std::vector<int32_t> ints = {INT_MAX, 1, 5, -7};
  std::vector<int32_t> int_totals(2);
  sum_in_rank_order(ints.data(), 2, 2, DType::i32, int_totals.data());
  EXPECT_EQ(int_totals, (std::vector<int32_t>{INT_MIN + 4, -6}));
  const std::vector<uint16_t> shorts = {65535, 2};
  uint16_t short_total = 0;
  sum_in_rank_order(shorts.data(), 2, 1, DType::u16, &short_total);
  EXPECT_EQ(short_total, 1);
}

TEST(Max, IsIndependentOfArgumentOrderDownToTheBits) {
  const std::vector<float> a = {1.0f, -3.0f, 0.0f, -0.0f, NAN, 2.0f, -INFINITY};
  const std::vector<float> b = {2.0f, -4.0f, -0.0f, 0.0f, 1.0f, -NAN, -5.0f};
  const std::vector<float> expected = {2.0f, -3.0f, 0.0f, 0.0f, NAN, NAN, -5.0f};
  std::vector<float> ab = b, ba = a;
  max_into(a.data(), ab.data(), static_cast<int64_t>(a.size()), DType::f32);
  max_into(b.data(), ba.data(), static_cast<int64_t>(b.size()), DType::f32);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(ab[i]), std::bit_cast<uint32_t>(ba[i])) << i;
    if (std::isnan(expected[i]))
      EXPECT_EQ(std::bit_cast<uint32_t>(ab[i]), 0x7fc00000u) << i;
    else
      EXPECT_EQ(std::bit_cast<uint32_t>(ab[i]), std::bit_cast<uint32_t>(expected[i])) << i;
  }
}

TEST(Max, HalvesCompareValuesNotBitPatterns) {
  // As raw bits -1 (0xbf80) is larger than 2 (0x4000); as values it is not.
  std::vector<uint16_t> bf16 = {float_to_bf16(-1.0f), float_to_bf16(-0.0f), 0x7fc1};
  const std::vector<uint16_t> other = {float_to_bf16(2.0f), float_to_bf16(0.0f),
                                       float_to_bf16(3.0f)};
  max_into(other.data(), bf16.data(), 3, DType::bf16);
  EXPECT_EQ(bf16_to_float(bf16[0]), 2.0f);
  EXPECT_EQ(bf16[1], 0x0000);
  EXPECT_EQ(bf16[2], 0x7fc0);

  std::vector<uint16_t> f16 = {float_to_f16(-1.0f), float_to_f16(0.5f)};
  const std::vector<uint16_t> f16_other = {float_to_f16(-2.0f), float_to_f16(0.25f)};
  max_into(f16_other.data(), f16.data(), 2, DType::f16);
  EXPECT_EQ(f16_to_float(f16[0]), -1.0f);
  EXPECT_EQ(f16_to_float(f16[1]), 0.5f);

  std::vector<int32_t> ints = {-5, 7};
  const std::vector<int32_t> int_other = {-4, 6};
  max_into(int_other.data(), ints.data(), 2, DType::i32);
  EXPECT_EQ(ints, (std::vector<int32_t>{-4, 7}));
}

TEST(Chunks, TileTheRangeInNearlyEqualParts) {
  for (int64_t count : {0, 1, 3, 4, 10, 1001}) {
    for (int parts : {1, 2, 3, 4, 7}) {
      EXPECT_EQ(chunk_begin(count, parts, 0), 0);
      EXPECT_EQ(chunk_begin(count, parts, parts), count);
      for (int i = 0; i < parts; ++i) {
        const int64_t size = chunk_begin(count, parts, i + 1) - chunk_begin(count, parts, i);
        EXPECT_GE(size, count / parts);
        EXPECT_LE(size, count / parts + 1);
      }
    }
  }
}

}  // namespace
}  // namespace anvil
