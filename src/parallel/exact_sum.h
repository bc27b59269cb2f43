// ExactSquareSum: the sum of squares of f32 values, held exactly as a 640-bit fixed-point
// integer. Any finite f32 is m * 2^k with integer m < 2^24 and k >= -149, so its square is
// m^2 * 2^(2k), an integer multiple of 2^-298 below 2^256: adding squares into an integer with
// that unit never rounds, and integer addition is associative. So the global gradient norm
// is the same bits whichever way the gradient is split across ranks, shards or threads, which
// a floating-point sum cannot promise (its rounding depends on the grouping).
#pragma once

#include <array>
#include <cstdint>

namespace anvil {

class ExactSquareSum {
 public:
  static constexpr int kLimbs = 10;  // squares reach bit 554; 2^64 of them fit below bit 640

  // Adds the squares of `count` f32 values (threads split the work; the result is exact).
  void add_squares(const float* values, int64_t count);
  // Adds another exact sum.
  void add(const ExactSquareSum& other);
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
  uint64_t flags_ = 0;  // bit 0: an infinity was added; bit 1: a NaN was added
};

}  // namespace anvil
