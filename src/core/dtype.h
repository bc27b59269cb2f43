// Element types and conversions. bf16 and f16 are stored as raw 16-bit patterns; every
// float -> half conversion rounds to nearest even and keeps NaN a NaN (quiet), matching
// PyTorch's and the hardware's rounding so results compare bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace anvil {

enum class DType : uint8_t { f32, bf16, f16, i32, u32, u16 };

// Returns the size in bytes of one element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
    case DType::u32:
      return 4;
    case DType::bf16:
    case DType::f16:
    case DType::u16:
      return 2;
  }
  return 0;
}

// Returns the lower-case name ("f32", "bf16", ...).
std::string_view dtype_name(DType t);
// Parses a name produced by dtype_name; throws anvil::Error naming the valid choices.
DType parse_dtype(std::string_view name);

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Converts to bf16 with round-to-nearest-even; NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
// Rounds a float to the nearest bf16 value and returns it as a float.
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// Converts to IEEE half with round-to-nearest-even, overflow to inf, subnormals kept.
uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);

}  // namespace anvil
