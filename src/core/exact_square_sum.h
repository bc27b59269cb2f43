// ExactSquareSum: the sum of squares of f32 values, held exactly as a 640-bit fixed-point
// integer. Any finite f32 is m * 2^k with integer m < 2^24 and k >= -149, so its square is
// m^2 * 2^(2k), an integer multiple of 2^-298 below 2^256: adding squares into an integer with
// that unit never rounds, and integer addition is associative. So the global gradient norm
// is the same bits however the gradient is split across ranks, shards, threads or device
// blocks, which a floating-point sum cannot promise (its rounding depends on the grouping).
//
// Devices add squares into digit counters instead (Backend::accumulate_exact_squares): the
// 640-bit integer cut into 20 digits of 32 bits, each with a 64-bit counter of its own, plus
// a flags word. A square touches at most three digits and adds less than 2^32 to each, so a
// counter takes 2^32 squares before it could overflow and needs no carry on the device, where
// carries would serialise the threads; add_digit_counters carries on the host.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace anvil {

// The digit form's geometry, in a header nvcc also compiles (constexpr, no library calls).
inline constexpr int kExactUnitExponent = -298;  // the integer's unit is 2^-298
inline constexpr int kExactDigitBits = 32;
inline constexpr int kExactDigitCount = 20;                // 640 bits
inline constexpr int kExactFlagsCounter = kExactDigitCount;  // the counter after the digits
inline constexpr int kExactCounterCount = kExactDigitCount + 1;
// How many squares may be added into zeroed counters before they are folded: each adds less
// than 2^32 to a counter, and 2^32 of those stay below 2^64.
inline constexpr int64_t kExactCounterCapacity = int64_t{1} << 32;
inline constexpr uint64_t kExactInfinityFlag = 1;
inline constexpr uint64_t kExactNanFlag = 2;

// Returns the bit (counted from the 2^-298 unit) at which the square of an f32's significand
// sits, for its biased exponent field `biased` below 255: the value is significand * 2^k with
// k = max(biased, 1) - 150, so its square is significand^2 * 2^(2k), at bit 2k + 298.
constexpr int exact_square_bit(uint32_t biased) {
  return 2 * ((biased == 0 ? 1 : static_cast<int>(biased)) - 150) - kExactUnitExponent;
}

// The square of one f32 as digit-counter increments: `low`, `middle` and `high` go to digits
// `digit`, `digit + 1` and `digit + 2`, and `flags` to the flags counter (an infinity or a NaN,
// whose square is not added).
struct ExactSquareDigits {
  int digit = 0;
  uint32_t low = 0, middle = 0, high = 0;
  uint64_t flags = 0;
};

// Returns the digit increments of the square of the f32 with bit pattern `bits`: the
// significand squared (below 2^48) at exact_square_bit (below bit 554, so digit + 2 < 20).
constexpr ExactSquareDigits exact_square_digits(uint32_t bits) {
  const uint32_t biased = (bits >> 23) & 0xffu;
  const uint32_t fraction = bits & 0x7fffffu;
  ExactSquareDigits d;
  if (biased == 0xffu) {
    d.flags = fraction != 0 ? kExactNanFlag : kExactInfinityFlag;
    return d;
  }
  const uint64_t significand = biased == 0 ? fraction : (fraction | 0x800000u);
  const uint64_t square = significand * significand;
  const int bit = exact_square_bit(biased);
  const int shift = bit % kExactDigitBits;
  const uint64_t shifted = square << shift;  // the low 64 bits of square * 2^shift (< 2^80)
  d.digit = bit / kExactDigitBits;
  d.low = static_cast<uint32_t>(shifted);
  d.middle = static_cast<uint32_t>(shifted >> 32);
  d.high = shift == 0 ? 0u : static_cast<uint32_t>(square >> (64 - shift));
  return d;
}

// The host kernel of Backend::accumulate_exact_squares (the cpu backend's, and sim's on its
// kernel view of device memory): adds the squares of `count` values to the digit counters.
void add_squares_to_digit_counters(const float* values, int64_t count,
                                   std::span<uint64_t, kExactCounterCount> counters);

class ExactSquareSum {
 public:
  static constexpr int kLimbs = 10;  // squares reach bit 554; 2^64 of them fit below bit 640

  // Digit counters then the flags counter, as Backend::accumulate_exact_squares leaves them.
  using DigitCounters = std::array<uint64_t, kExactCounterCount>;

  // Adds the squares of `count` f32 values (threads split the work; the result is exact).
  void add_squares(const float* values, int64_t count);
  // Adds another exact sum.
  void add(const ExactSquareSum& other);
  // Adds the value the digit counters stand for (sum over d of counter d * 2^(32 d) units),
  // carrying between limbs, and their flags.
  void add_digit_counters(const DigitCounters& counters);
  // Adds this sum to digit counters: each 32-bit digit of the integer to its counter (less
  // than 2^32, as one square adds at most), the flags to the flags counter.
  void add_to_digit_counters(std::span<uint64_t, kExactCounterCount> counters) const;
  // Returns the sum rounded to double (a pure function of the exact value): +inf when an
  // infinity was added, NaN when a NaN was.
  double value() const;
  // Returns whether nothing non-finite was added.
  bool finite() const { return flags_ == 0; }
  bool operator==(const ExactSquareSum&) const = default;

  // The plain-data form exchanged between ranks: limbs, then the non-finite flags.
  using Words = std::array<uint64_t, kLimbs + 1>;
  Words to_words() const;
  static ExactSquareSum from_words(const Words& words);

 private:
  // Adds `value` * 2^bit (bit counted from the 2^-298 unit).
  void add_shifted(uint64_t value, int bit);
  // Adds `part` to limb `limb`, carrying upwards.
  void add_at(int limb, uint64_t part);

  std::array<uint64_t, kLimbs> limbs_{};
  uint64_t flags_ = 0;  // kExactInfinityFlag: an infinity was added; kExactNanFlag: a NaN was
};

}  // namespace anvil
