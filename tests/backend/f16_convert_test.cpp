// The f16 loads and stores of every kernel table this CPU can run (F16C on avx512 and avx2, the
// portable bit arithmetic on generic), through Kernels::convert, against core/dtype's scalar
// conversions, which define f16: every half widens to the same float bits, and floats at,
// just above and just below every rounding position of every exponent (normal, subnormal,
// overflow) narrow to the same half bits. NaN payloads are the one freedom (F16C keeps them,
// the scalar code makes one quiet NaN): a NaN must stay a NaN of the same sign.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/optimized/isa.h"
#include "backend/cpu/optimized/kernels.h"
#include "core/dtype.h"

namespace anvil {
namespace {

const cpu_opt::Kernels& table_named(const std::string& name) {
#if defined(__x86_64__)
  if (name == "avx512") return cpu_opt::avx512_kernels();
  if (name == "avx2") return cpu_opt::avx2_kernels();
#endif
  return cpu_opt::generic_kernels();
}

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

TEST(KernelTables, F16ConversionsMatchTheScalarOnesBitForBit) {
  // Every half, an odd count so the last vector is partial.
  std::vector<uint16_t> halves(65537);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  // Floats whose low 12 bits are 0, 1 or 0xfff under every pattern of the upper 20 (sign,
  // exponent, the 10 bits a half keeps and the first dropped bit): for each exponent these are
  // the exact ties, one ulp above them and one ulp below, wherever the rounding position falls.
  std::vector<float> floats;
  for (uint32_t upper = 0; upper < (1u << 20); ++upper)
    for (uint32_t low : {0u, 1u, 0xfffu}) floats.push_back(bits_float(upper << 12 | low));
  for (const std::string& name : cpu_opt::supported_kernel_tables()) {
    const cpu_opt::Kernels& kernels = table_named(name);
    std::vector<float> widened(halves.size());
    kernels.convert(halves.data(), DType::f16, widened.data(), DType::f32,
                    static_cast<int64_t>(halves.size()));
    int64_t bad_loads = 0;
    for (size_t i = 0; i < halves.size(); ++i) {
      const float want = f16_to_float(halves[i]);
      const bool ok = half_is_nan(halves[i]) ? widened[i] != widened[i] &&
                                                   std::signbit(widened[i]) == std::signbit(want)
                                             : float_bits(widened[i]) == float_bits(want);
      if (!ok && bad_loads++ < 5)
        ADD_FAILURE() << name << ": half 0x" << std::hex << halves[i] << " widened to 0x"
                      << float_bits(widened[i]) << ", want 0x" << float_bits(want);
    }
    std::vector<uint16_t> narrowed(floats.size());
    kernels.convert(floats.data(), DType::f32, narrowed.data(), DType::f16,
                    static_cast<int64_t>(floats.size()));
    int64_t bad_stores = 0;
    for (size_t i = 0; i < floats.size(); ++i) {
      const uint16_t want = float_to_f16(floats[i]);
      const bool ok = floats[i] != floats[i]
                          ? half_is_nan(narrowed[i]) && (narrowed[i] & 0x8000u) == (want & 0x8000u)
                          : narrowed[i] == want;
      if (!ok && bad_stores++ < 5)
        ADD_FAILURE() << name << ": float 0x" << std::hex << float_bits(floats[i])
                      << " narrowed to 0x" << narrowed[i] << ", want 0x" << want;
    }
    std::printf("[f16] %s table: %zu halves widened, %zu floats narrowed: %lld and %lld differ\n",
                name.c_str(), halves.size(), floats.size(), static_cast<long long>(bad_loads),
                static_cast<long long>(bad_stores));
    EXPECT_EQ(bad_loads, 0) << name;
    EXPECT_EQ(bad_stores, 0) << name;
  }
}

}  // namespace
}  // namespace anvil
