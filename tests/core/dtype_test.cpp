// DType conversions: round-to-nearest-even, NaN/inf handling and exact round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace anvil {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly halfway between bf16 1.0 and 1.0078125: ties go to the even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), float_to_bf16(1.0f));
  // 1 + 3 * 2^-8 is halfway between 1.0078125 (odd mantissa) and 1.015625: rounds up.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)), 1.015625f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.01f / 256)), 1.0078125f);
}

TEST(DType, Bf16SpecialValues) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest float rounds up to infinity in bf16, as in PyTorch.
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
}

TEST(DType, Bf16RoundTripIsExactForAllPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), h) << h;
  }
}

TEST(DType, F16RoundTripIsExactForAllPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f), h) << h;
  }
}

TEST(DType, F16Rounding) {
  EXPECT_EQ(f16_to_float(float_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(65520.0f))));  // halfway to 2^16: even = inf
  EXPECT_EQ(f16_to_float(float_to_f16(65519.0f)), 65504.0f);
  // Halfway between 1 and the next half (1 + 2^-10): ties to even gives 1.
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 1.0f / 2048)), 1.0f);
  // Smallest subnormal, and half of it ties to zero (even).
  EXPECT_EQ(f16_to_float(float_to_f16(5.9604645e-8f)), 5.9604645e-8f);
  EXPECT_EQ(float_to_f16(2.9802322e-8f), 0);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
}

TEST(DType, ParseNamesAndRejectUnknown) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(dtype_size(DType::u16), 2u);
  EXPECT_THROW(parse_dtype("fp8"), Error);
}

}  // namespace
}  // namespace anvil
