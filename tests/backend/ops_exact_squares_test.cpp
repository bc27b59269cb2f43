// accumulate_exact_squares on every backend (cuda included where a device is present; the
// driver prints why it is skipped otherwise): the counters, copied to the host and folded,
// equal ExactSquareSum::add_squares of the same values bit for bit, for random values with
// subnormals, the largest finite values, zeros, +-inf and NaN, for several calls adding into
// the same counters, and for an empty tensor. Counters are compared folded, not word by word:
// a device may leave its digits uncarried (above 2^32) where the host kernel carries them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/exact_square_sum.h"
#include "error_message.h"
#include "op_driver.h"

namespace anvil::test {
namespace {

// Random values over the whole f32 range: magnitudes 2^-149 (subnormal) to 2^127 with random
// significands, zeros of both signs, and the largest finite value.
std::vector<float> full_range_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) {
    const uint32_t bits = static_cast<uint32_t>(rng()) % 0x7f800000u | (rng() & 0x80000000u);
    std::memcpy(&v, &bits, sizeof(v));
  }
  if (n >= 4) {
    values[0] = 0.0f;
    values[1] = -0.0f;
    values[2] = std::numeric_limits<float>::max();
    values[3] = -std::numeric_limits<float>::denorm_min();
  }
  return values;
}

// Device counters, zeroed, and a device copy of host values, on one backend.
class ExactSquaresRun {
 public:
  explicit ExactSquaresRun(Backend& backend)
      : backend_(backend),
        counter_buffer_(backend, kExactCounterCount * sizeof(uint64_t), MemoryCategory::workspace),
        counters_(counter_buffer_.as(DType::u32, Shape{2 * kExactCounterCount})) {
    backend.fill_zero(counters_);
  }

  // Adds the squares of `values` [begin, begin + count) with one call.
  void add(const std::vector<float>& values, int64_t begin, int64_t count) {
    if (!values_.data() || values_.bytes() < values.size() * sizeof(float)) {
      values_ = Buffer(backend_, std::max<size_t>(1, values.size()) * sizeof(float),
                       MemoryCategory::workspace);
    }
    const Tensor all = values_.as(DType::f32, Shape{static_cast<int64_t>(values.size())});
    if (!values.empty()) backend_.copy_from_host(all, values.data());
    backend_.accumulate_exact_squares(all.flat(begin, count), counters_);
  }

  ExactSquareSum folded() const {
    ExactSquareSum::DigitCounters counters;
    backend_.copy_to_host(counters.data(), counters_);
    ExactSquareSum sum;
    sum.add_digit_counters(counters);
    return sum;
  }
  Tensor counters() const { return counters_; }

 private:
  Backend& backend_;
  Buffer counter_buffer_;
  Tensor counters_;
  Buffer values_;
};

ExactSquareSum host_sum(const std::vector<float>& values, int64_t begin, int64_t count) {
  ExactSquareSum sum;
  sum.add_squares(values.data() + begin, count);
  return sum;
}

void expect_equal(const ExactSquareSum& got, const ExactSquareSum& want, const Backend& backend,
                  const std::string& what) {
  const bool same = got == want;
  std::printf("[ops] accumulate_exact_squares %s on %s: %s\n", what.c_str(),
              backend.name().c_str(), same ? "bit-identical OK" : "FAIL");
  EXPECT_TRUE(same) << backend.name() << " " << what << ": got " << got.value() << ", want "
                    << want.value();
}

TEST(Ops, AccumulateExactSquaresEqualsTheHostSum) {
  for (const auto& backend : available_backends()) {
    // Long enough for the host kernel's threads and many device blocks.
    for (const int64_t n : {int64_t{1}, int64_t{1001}, int64_t{300007}}) {
      const std::vector<float> values = full_range_values(n, static_cast<uint32_t>(n));
      ExactSquaresRun run(*backend);
      run.add(values, 0, n);
      expect_equal(run.folded(), host_sum(values, 0, n), *backend, "n=" + std::to_string(n));
    }
    // Several calls into the same counters, an empty one among them.
    const std::vector<float> values = full_range_values(100003, 9);
    ExactSquaresRun parts(*backend);
    parts.add(values, 0, 40000);
    parts.add(values, 40000, 0);
    parts.add(values, 40000, 60003);
    parts.add(values, 40000, 60003);  // the same range twice: twice its squares
    ExactSquareSum want = host_sum(values, 0, 100003);
    want.add(host_sum(values, 40000, 60003));
    expect_equal(parts.folded(), want, *backend, "three calls and an empty one");

    ExactSquaresRun empty(*backend);
    empty.add(values, 5, 0);
    expect_equal(empty.folded(), ExactSquareSum(), *backend, "empty tensor");

    // Non-finite values set the flags as the host sum does; their squares are not added.
    for (const float bad : {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::nanf("")}) {
      std::vector<float> broken = full_range_values(70001, 3);
      broken[35000] = bad;
      ExactSquaresRun run(*backend);
      run.add(broken, 0, 70001);
      const ExactSquareSum got = run.folded();
      expect_equal(got, host_sum(broken, 0, 70001), *backend,
                   "with " + std::to_string(bad) + " at 35000");
      EXPECT_EQ(std::isnan(got.value()), std::isnan(bad)) << backend->name();
      EXPECT_EQ(std::isinf(got.value()), std::isinf(bad)) << backend->name();
    }
  }
}

TEST(BadInput, AccumulateExactSquaresChecksItsCounters) {
  for (const auto& backend : available_backends()) {
    ExactSquaresRun run(*backend);
    Buffer values(*backend, 64 * sizeof(float), MemoryCategory::workspace);
    const Tensor x = values.as(DType::f32, Shape{64});
    const std::string wrong_dtype = error_message([&] {
      backend->accumulate_exact_squares(x, x.flat(0, 2 * kExactCounterCount));
    });
    EXPECT_NE(wrong_dtype.find("[accumulate_exact_squares] counters has dtype f32, expected u32"),
              std::string::npos)
        << backend->name() << ": " << wrong_dtype;
    const Tensor short_counters = run.counters().flat(0, kExactCounterCount);
    EXPECT_NE(error_message([&] { backend->accumulate_exact_squares(x, short_counters); })
                  .find("counters has shape (21), expected (42)"),
              std::string::npos)
        << backend->name();
    const Tensor bf16 = values.as(DType::bf16, Shape{64});
    EXPECT_NE(error_message([&] { backend->accumulate_exact_squares(bf16, run.counters()); })
                  .find("x has dtype bf16, expected f32"),
              std::string::npos)
        << backend->name();
    // One word in: the counters are 64-bit integers.
    const Tensor unaligned = values.as(DType::u32, Shape{64}).flat(1, 2 * kExactCounterCount);
    EXPECT_NE(error_message([&] { backend->accumulate_exact_squares(x, unaligned); })
                  .find("counters must be 8-byte aligned"),
              std::string::npos)
        << backend->name();
    expect_equal(run.folded(), ExactSquareSum(), *backend, "after rejected calls");
  }
}

}  // namespace
}  // namespace anvil::test
