// What the host CPU offers: model name, cores and the SIMD features kernels dispatch on.
// Read once from CPUID (and /proc/cpuinfo for the name); cheap to call repeatedly.
#pragma once

#include <string>

namespace anvil {

struct CpuInfo {
  std::string model_name;
  int cores = 1;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  // Returns "AVX2 FMA AVX-512F ..." for the features present.
  std::string feature_list() const;
};

// Returns the host CPU's description (computed on first call).
const CpuInfo& cpu_info();

}  // namespace anvil
