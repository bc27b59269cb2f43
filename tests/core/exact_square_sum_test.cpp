// ExactSquareSum: the same bits under any grouping, the right value, non-finite values, and
// the digit-counter form devices accumulate (Backend::accumulate_exact_squares): the per-square
// digit formula the CUDA kernel runs, and the host's carrying fold of counters near overflow.
#include "core/exact_square_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

namespace anvil {
namespace {

using Counters = ExactSquareSum::DigitCounters;

std::vector<float> wide_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 60);
  std::vector<float> values(n);
  for (float& v : values) v = std::ldexp(mantissa(rng), exponent(rng));
  return values;
}

ExactSquareSum sum_of_squares(const std::vector<float>& values) {
  ExactSquareSum sum;
  sum.add_squares(values.data(), static_cast<int64_t>(values.size()));
  return sum;
}

TEST(ExactSquareSum, EveryGroupingGivesTheSameBits) {
  const std::vector<float> values = wide_values(300000, 7);
  const ExactSquareSum whole = sum_of_squares(values);
  for (size_t parts : {2u, 3u, 7u, 64u}) {
    ExactSquareSum combined;
    for (size_t p = 0; p < parts; ++p) {
      const size_t begin = values.size() * p / parts, end = values.size() * (p + 1) / parts;
      ExactSquareSum piece;
      piece.add_squares(values.data() + begin, static_cast<int64_t>(end - begin));
      combined.add(piece);
    }
    EXPECT_EQ(combined, whole) << parts << " parts";
  }
  std::vector<float> shuffled = values;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  EXPECT_EQ(sum_of_squares(shuffled), whole);
  EXPECT_EQ(ExactSquareSum::from_words(whole.to_words()), whole);
}

TEST(ExactSquareSum, ValueIsTheCorrectSum) {
  const std::vector<float> values = {3.0f, -4.0f, 1e-30f, 1e20f, 0.0f, -0.0f, 1e-45f};
  const ExactSquareSum sum = sum_of_squares(values);
  long double expected = 0;
  for (float v : values) expected += static_cast<long double>(v) * v;
  EXPECT_NEAR(sum.value(), static_cast<double>(expected), 1e-15 * static_cast<double>(expected));

  const ExactSquareSum exact = sum_of_squares({0.5f, 0.25f, 3.0f});
  EXPECT_EQ(exact.value(), 0.25 + 0.0625 + 9.0);
  EXPECT_TRUE(exact.finite());
  EXPECT_EQ(ExactSquareSum().value(), 0.0);
}

TEST(ExactSquareSum, NonFiniteValuesPropagate) {
  std::vector<float> values = wide_values(1000, 1);
  values[17] = std::numeric_limits<float>::infinity();
  const ExactSquareSum inf = sum_of_squares(values);
  EXPECT_FALSE(inf.finite());
  EXPECT_TRUE(std::isinf(inf.value()));
  values[500] = std::nanf("");
  const ExactSquareSum nan = sum_of_squares(values);
  EXPECT_TRUE(std::isnan(nan.value()));
  ExactSquareSum finite;
  finite.add(nan);
  EXPECT_TRUE(std::isnan(finite.value()));
}

// Values covering every exponent field (subnormals, the largest finite value, zeros of both
// signs) and the non-finite ones, whose squares are flags.
std::vector<float> every_exponent(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> values;
  for (uint32_t biased = 0; biased < 256; ++biased) {
    for (uint32_t fraction : {0u, 1u, 0x7fffffu, static_cast<uint32_t>(rng()) & 0x7fffffu}) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        const uint32_t bits = sign | biased << 23 | fraction;
        float value;
        std::memcpy(&value, &bits, sizeof(value));
        values.push_back(value);
      }
    }
  }
  return values;
}

// Adds each value's digit increments (exact_square_digits, what the CUDA kernel adds) into
// counters, as a device would.
Counters digit_counters(const std::vector<float>& values) {
  Counters counters{};
  for (float value : values) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    const ExactSquareDigits d = exact_square_digits(bits);
    EXPECT_LT(d.digit + 2, kExactDigitCount);
    counters[d.digit] += d.low;
    counters[d.digit + 1] += d.middle;
    counters[d.digit + 2] += d.high;
    counters[kExactFlagsCounter] |= d.flags;
  }
  return counters;
}

TEST(ExactSquareDigits, EachSquaresDigitsFoldToTheExactSum) {
  for (const std::vector<float>& values :
       {every_exponent(1), wide_values(20000, 2), std::vector<float>{0.0f, -0.0f}}) {
    std::vector<float> finite;
    std::copy_if(values.begin(), values.end(), std::back_inserter(finite),
                 [](float v) { return std::isfinite(v); });
    const std::vector<float>* sets[] = {&values, &finite};
    for (const std::vector<float>* set : sets) {
      ExactSquareSum folded;
      folded.add_digit_counters(digit_counters(*set));
      EXPECT_EQ(folded, sum_of_squares(*set)) << set->size() << " values";
    }
  }
  const std::vector<float> one_inf = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_EQ(digit_counters(one_inf)[kExactFlagsCounter], kExactInfinityFlag);
  EXPECT_EQ(digit_counters({-std::nanf("")})[kExactFlagsCounter], kExactNanFlag);
}

// The value of digit counters by a method of the test's own: 32-bit positions, each taking
// the low half of its counter, the high half of the one below and the carry, truncated to
// 640 bits as the sum is. Returns the 64-bit limbs.
ExactSquareSum::Words fold_by_positions(const Counters& counters, ExactSquareSum::Words start) {
  std::array<uint32_t, 2 * ExactSquareSum::kLimbs> positions{};
  for (int i = 0; i < ExactSquareSum::kLimbs; ++i) {
    positions[2 * i] = static_cast<uint32_t>(start[i]);
    positions[2 * i + 1] = static_cast<uint32_t>(start[i] >> 32);
  }
  uint64_t carry = 0;
  for (int d = 0; d < kExactDigitCount; ++d) {
    const uint64_t total = carry + positions[d] + (counters[d] & 0xffffffffu) +
                           (d > 0 ? counters[d - 1] >> 32 : 0);
    positions[d] = static_cast<uint32_t>(total);
    carry = total >> 32;
  }
  ExactSquareSum::Words words{};
  for (int i = 0; i < ExactSquareSum::kLimbs; ++i)
    words[i] = positions[2 * i] | static_cast<uint64_t>(positions[2 * i + 1]) << 32;
  words[ExactSquareSum::kLimbs] = start[ExactSquareSum::kLimbs] | counters[kExactFlagsCounter];
  return words;
}

TEST(ExactSquareDigits, FoldingCarriesAcrossEveryDigit) {
  const uint64_t all_ones = ~uint64_t{0};
  std::vector<Counters> cases;
  cases.push_back({});
  cases.back().fill(all_ones);  // every counter full: carries out of every position
  cases.back()[kExactFlagsCounter] = 0;
  Counters alternating{};
  for (int d = 0; d < kExactDigitCount; ++d)
    alternating[d] = d % 2 ? 0xffffffff00000001u : 0x00000000ffffffffu;
  cases.push_back(alternating);
  std::mt19937_64 rng(11);
  for (int k = 0; k < 20; ++k) {
    Counters random{};
    for (int d = 0; d < kExactDigitCount; ++d) random[d] = rng() >> (rng() % 64);
    cases.push_back(random);
  }
  // A sum whose limbs are all ones below the top one: one unit ripples through every limb.
  ExactSquareSum::Words almost_full{};
  for (int i = 0; i + 1 < ExactSquareSum::kLimbs; ++i) almost_full[i] = all_ones;
  almost_full[ExactSquareSum::kLimbs - 1] = 5;
  Counters one{};
  one[0] = 1;
  cases.push_back(one);
  for (const ExactSquareSum::Words& start : {ExactSquareSum::Words{}, almost_full}) {
    for (size_t c = 0; c < cases.size(); ++c) {
      ExactSquareSum sum = ExactSquareSum::from_words(start);
      sum.add_digit_counters(cases[c]);
      EXPECT_EQ(sum.to_words(), fold_by_positions(cases[c], start)) << "case " << c;
    }
  }
  ExactSquareSum rippled = ExactSquareSum::from_words(almost_full);
  rippled.add_digit_counters(one);
  ExactSquareSum::Words expected{};
  expected[ExactSquareSum::kLimbs - 1] = 6;
  EXPECT_EQ(rippled.to_words(), expected);
}

TEST(ExactSquareDigits, CountersHoldTheirCapacityOfTheLargestSquares) {
  // kExactCounterCapacity squares of the largest finite f32: each counter gets 2^32 times an
  // increment below 2^32, so none overflows, and the fold is that square times 2^32.
  const float largest = std::numeric_limits<float>::max();
  Counters counters = digit_counters({largest});
  for (int d = 0; d < kExactDigitCount; ++d) {
    ASSERT_LT(counters[d], uint64_t{1} << 32);
    counters[d] *= static_cast<uint64_t>(kExactCounterCapacity);
  }
  ExactSquareSum folded;
  folded.add_digit_counters(counters);
  ExactSquareSum expected = sum_of_squares({largest});
  for (int doubling = 0; doubling < 32; ++doubling) expected.add(ExactSquareSum(expected));
  EXPECT_EQ(folded, expected);
  EXPECT_EQ(folded.value(), std::ldexp(static_cast<double>(largest) * largest, 32));
}

TEST(ExactSquareDigits, ASumPassesThroughCountersUnchanged) {
  std::vector<float> values = wide_values(5000, 4);
  values.push_back(std::numeric_limits<float>::max());
  values.push_back(std::numeric_limits<float>::infinity());
  const ExactSquareSum sum = sum_of_squares(values);
  Counters counters{};
  sum.add_to_digit_counters(counters);
  for (int d = 0; d < kExactDigitCount; ++d) EXPECT_LT(counters[d], uint64_t{1} << 32);
  ExactSquareSum back;
  back.add_digit_counters(counters);
  EXPECT_EQ(back, sum);
  // The host kernel adds onto what the counters hold.
  add_squares_to_digit_counters(values.data(), static_cast<int64_t>(values.size()), counters);
  ExactSquareSum twice;
  twice.add_digit_counters(counters);
  ExactSquareSum doubled = sum;
  doubled.add(sum);
  EXPECT_EQ(twice, doubled);
}

}  // namespace
}  // namespace anvil
