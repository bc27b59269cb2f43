// Exact sum of squares (see exact_sum.h). The hot loop buckets squares by the f32 exponent in
// plain 64-bit integers (each square's integer part m^2 is below 2^48, so a bucket takes 2^16
// of them before it could overflow) and folds the buckets into the wide integer once per block.
#include "parallel/exact_sum.h"

#include <cmath>
#include <cstring>

namespace anvil {
namespace {

constexpr int64_t kBlock = int64_t{1} << 16;  // squares per bucket before folding
constexpr int kUnitExponent = -298;           // the integer's unit is 2^-298
constexpr uint64_t kInfinityFlag = 1;
constexpr uint64_t kNanFlag = 2;

// Returns the power of two of an f32 with biased exponent field `biased` (0 = subnormal):
// value = m * 2^k with m the 24-bit significand (implicit bit included when normal).
int significand_exponent(int biased) { return (biased == 0 ? 1 : biased) - 150; }

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
          if (std::isnan(values[i])) local.flags_ |= kNanFlag;
          if (std::isinf(values[i])) local.flags_ |= kInfinityFlag;
        }
      }
      for (int biased = 0; biased < 255; ++biased) {
        local.add_shifted(buckets[biased], 2 * significand_exponent(biased) - kUnitExponent);
      }
    }
#pragma omp critical(anvil_exact_square_sum)
    add(local);
  }
}

void ExactSquareSum::add(const ExactSquareSum& other) {
  for (int i = 0; i < kLimbs; ++i) add_at(i, other.limbs_[i]);
  flags_ |= other.flags_;
}

double ExactSquareSum::value() const {
  if (flags_ & kNanFlag) return std::nan("");
  if (flags_ & kInfinityFlag) return HUGE_VAL;
  int top = kLimbs - 1;
  while (top >= 0 && limbs_[top] == 0) --top;
  if (top < 0) return 0.0;
  // The top three limbs carry 129+ significant bits, far more than a double keeps; the sum
  // of their rounded values is a fixed function of the exact integer.
  double result = 0.0;
  for (int i = top; i >= 0 && i > top - 3; --i) {
    result += std::ldexp(static_cast<double>(limbs_[i]), 64 * i + kUnitExponent);
  }
  return result;
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
