// DType names and IEEE half conversions (bf16 ones are inline in the header).
#include "core/dtype.h"

#include "core/error.h"

#include <cmath>

namespace anvil {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
    case DType::u16: return "u16";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u32, DType::u16})
    if (dtype_name(t) == name) return t;
  ANVIL_FAIL("[dtype] unknown dtype '{}' (expected f32, bf16, f16, i32, u32 or u16)", name);
}

uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;            // NaN
  // >= 65536 overflows; [65520, 65536) also ends at inf through the carry in the normal path.
  if (abs >= 0x47800000u) return sign | 0x7c00u;
  if (abs < 0x38800000u) {                                 // below smallest normal half: subnormal
    // Subnormal half = round(|f| / 2^-24); use float arithmetic, which rounds to nearest even.
    const float scaled = bits_float(abs) * 16777216.0f;  // exact (power-of-two scale)
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));  // default mode: nearest even
  }
  // Normal: rebias exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;  // may carry into inf: correct
  return sign | static_cast<uint16_t>(h);
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) / 16777216.0f;  // mant * 2^-24
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace anvil
