// Exact sum of squares (see exact_square_sum.h). The hot loop buckets squares by the f32
// exponent in plain 64-bit integers (each square's integer part m^2 is below 2^48, so a bucket
// takes 2^16 of them before it could overflow) and folds the buckets into the wide integer
// once per block.
#include "core/exact_square_sum.h"

#include <cmath>
#include <cstring>

namespace anvil {
namespace {

constexpr int64_t kBlock = int64_t{1} << 16;  // squares per bucket before folding
constexpr int kDigitsPerLimb = 64 / kExactDigitBits;

}  // namespace

void ExactSquareSum::add_at(int limb, uint64_t part) {
  for (; part != 0 && limb < kLimbs; ++limb) {
    const uint64_t sum = limbs_[limb] + part;
    part = sum < part ? 1 : 0;  // the carry into the next limb
    limbs_[limb] = sum;
  }
}

void ExactSquareSum::add_shifted(uint64_t value, int bit) {
  const int limb = bit / 64;
  const int offset = bit % 64;
  add_at(limb, value << offset);
  if (offset != 0) add_at(limb + 1, value >> (64 - offset));
}

void ExactSquareSum::add_squares(const float* values, int64_t count) {
  const int64_t blocks = (count + kBlock - 1) / kBlock;
#pragma omp parallel if (blocks > 1)
  {
    ExactSquareSum local;
    uint64_t buckets[256];
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      std::memset(buckets, 0, sizeof(buckets));
      const int64_t begin = block * kBlock;
      const int64_t end = begin + kBlock < count ? begin + kBlock : count;
      for (int64_t i = begin; i < end; ++i) {
        uint32_t bits;
        std::memcpy(&bits, values + i, sizeof(bits));
        const uint32_t biased = (bits >> 23) & 0xffu;
        const uint64_t fraction = bits & 0x7fffffu;
        const uint64_t significand = biased == 0 ? fraction : (fraction | 0x800000u);
        buckets[biased] += significand * significand;
      }
      if (buckets[255] != 0) {  // exponent field all ones: an infinity or a NaN
        for (int64_t i = begin; i < end; ++i) {
          if (std::isnan(values[i])) local.flags_ |= kExactNanFlag;
          if (std::isinf(values[i])) local.flags_ |= kExactInfinityFlag;
        }
      }
      for (uint32_t biased = 0; biased < 255; ++biased)
        local.add_shifted(buckets[biased], exact_square_bit(biased));
    }
#pragma omp critical(anvil_exact_square_sum)
    add(local);
  }
}

void ExactSquareSum::add(const ExactSquareSum& other) {
  for (int i = 0; i < kLimbs; ++i) add_at(i, other.limbs_[i]);
  flags_ |= other.flags_;
}

void ExactSquareSum::add_digit_counters(const DigitCounters& counters) {
  for (int d = 0; d < kExactDigitCount; ++d) add_shifted(counters[d], d * kExactDigitBits);
  flags_ |= counters[kExactFlagsCounter];
}

void ExactSquareSum::add_to_digit_counters(
    std::span<uint64_t, kExactCounterCount> counters) const {
  for (int d = 0; d < kExactDigitCount; ++d) {
    const uint64_t limb = limbs_[d / kDigitsPerLimb];
    counters[d] += (limb >> (d % kDigitsPerLimb * kExactDigitBits)) & 0xffffffffu;
  }
  counters[kExactFlagsCounter] |= flags_;
}

double ExactSquareSum::value() const {
  if (flags_ & kExactNanFlag) return std::nan("");
  if (flags_ & kExactInfinityFlag) return HUGE_VAL;
  int top = kLimbs - 1;
  while (top >= 0 && limbs_[top] == 0) --top;
  if (top < 0) return 0.0;
  // The top three limbs carry 129+ significant bits, far more than a double keeps; the sum
  // of their rounded values is a fixed function of the exact integer.
  double result = 0.0;
  for (int i = top; i >= 0 && i > top - 3; --i) {
    result += std::ldexp(static_cast<double>(limbs_[i]), 64 * i + kExactUnitExponent);
  }
  return result;
}

void add_squares_to_digit_counters(const float* values, int64_t count,
                                   std::span<uint64_t, kExactCounterCount> counters) {
  // The bucketed exact sum is the fast host path; its digits (each below 2^32, as one
  // square's are) then go to the counters, so the capacity rule holds with room to spare.
  ExactSquareSum sum;
  sum.add_squares(values, count);
  sum.add_to_digit_counters(counters);
}

ExactSquareSum::Words ExactSquareSum::to_words() const {
  Words words{};
  for (int i = 0; i < kLimbs; ++i) words[i] = limbs_[i];
  words[kLimbs] = flags_;
  return words;
}

ExactSquareSum ExactSquareSum::from_words(const Words& words) {
  ExactSquareSum sum;
  for (int i = 0; i < kLimbs; ++i) sum.limbs_[i] = words[i];
  sum.flags_ = words[kLimbs];
  return sum;
}

}  // namespace anvil
