// Kernel-table selection from CPUID features (core/cpu_info.h) and ANVIL_CPU_ISA.
#include "backend/cpu/optimized/isa.h"

#include <cstdlib>
#include <string>

#include "core/cpu_info.h"
#include "core/error.h"

namespace anvil::cpu_opt {
namespace {

// Every x86 CPU with AVX2 + FMA also has F16C (Intel since Ivy Bridge, AMD since
// Piledriver), which the avx2 and avx512 tables' f16 loads and stores use.
bool has_avx2() {
  const CpuInfo& cpu = cpu_info();
  return cpu.avx2 && cpu.fma;
}

bool has_avx512() {
  const CpuInfo& cpu = cpu_info();
  return has_avx2() && cpu.avx512f && cpu.avx512bw && cpu.avx512vl;
}

}  // namespace

const Kernels& select_kernels() {
  const char* env = std::getenv("ANVIL_CPU_ISA");
  const std::string wanted = env ? env : "";
#if defined(__x86_64__)
  if (wanted.empty()) {
    if (has_avx512()) return avx512_kernels();
    if (has_avx2()) return avx2_kernels();
    return generic_kernels();
  }
  if (wanted == "avx512") {
    ANVIL_CHECK(has_avx512(), "[cpu] ANVIL_CPU_ISA=avx512 but this CPU lacks AVX-512F/BW/VL "
                "(it has: {})", cpu_info().feature_list());
    return avx512_kernels();
  }
  if (wanted == "avx2") {
    ANVIL_CHECK(has_avx2(), "[cpu] ANVIL_CPU_ISA=avx2 but this CPU lacks AVX2 + FMA (it has: {})",
                cpu_info().feature_list());
    return avx2_kernels();
  }
#else
  if (wanted.empty()) return generic_kernels();
#endif
  ANVIL_CHECK(wanted == "generic", "[cpu] ANVIL_CPU_ISA must be generic, avx2 or avx512, got '{}'",
              wanted);
  return generic_kernels();
}

std::vector<std::string> supported_kernel_tables() {
  std::vector<std::string> tables;
#if defined(__x86_64__)
  if (has_avx512()) tables.push_back("avx512");
  if (has_avx2()) tables.push_back("avx2");
#endif
  tables.push_back("generic");
  return tables;
}

}  // namespace anvil::cpu_opt
