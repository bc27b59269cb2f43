// CPUID-based feature detection (x86-64); other architectures report no x86 features.
#include "core/cpu_info.h"

#include <fstream>

#include "core/threading.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace anvil {
namespace {

CpuInfo detect() {
  CpuInfo info;
  info.cores = available_cores();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      info.model_name = line.substr(line.find(':') + 2);
      break;
    }
  }
  if (info.model_name.empty()) info.model_name = "unknown CPU";
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) info.fma = (c >> 12) & 1;
  // AVX state must also be enabled by the OS (XCR0); __builtin_cpu_supports checks that.
  __builtin_cpu_init();
  info.avx2 = __builtin_cpu_supports("avx2");
  info.avx512f = __builtin_cpu_supports("avx512f");
  info.avx512bw = __builtin_cpu_supports("avx512bw");
  info.avx512vl = __builtin_cpu_supports("avx512vl");
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) info.avx512_bf16 = info.avx512f && ((a >> 5) & 1);
#endif
  return info;
}

}  // namespace

std::string CpuInfo::feature_list() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += s.empty() ? name : std::string(" ") + name;
  };
  add(avx2, "AVX2");
  add(fma, "FMA");
  add(avx512f, "AVX-512F");
  add(avx512bw, "AVX-512BW");
  add(avx512vl, "AVX-512VL");
  add(avx512_bf16, "AVX512-BF16");
  return s.empty() ? "none" : s;
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

}  // namespace anvil
