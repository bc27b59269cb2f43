// The generic kernel table: the shared kernel sources (simd.inc, elementwise.inc, rows.inc,
// attention.inc) compiled for the build's baseline instruction set with 4-lane GCC vectors
// (SSE2 on x86-64, NEON on AArch64, plain scalar code elsewhere). No intrinsics and no FMA, so
// it runs on any CPU the binary runs on (f16 converts by the portable bit arithmetic of
// simd.inc); it is the fallback when AVX2 is missing and the path
// ANVIL_CPU_ISA=generic forces for testing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/optimized/kernels.h"

#pragma GCC push_options
// Plain operators must not fuse (AArch64 has FMA in its baseline), so results follow the
// reference's f32 operation order.
#pragma GCC optimize("fp-contract=off")

namespace anvil::cpu_opt::generic {

constexpr int kLanes = 4;

// Returns the lane-wise square root (the compiler maps it to the baseline's vector sqrt).
template <typename V>
inline V portable_sqrt(V a) {
  for (int i = 0; i < kLanes; ++i) a[i] = __builtin_sqrtf(a[i]);
  return a;
}

#define ANVIL_SIMD_FMADD(a, b, c) ((a) * (b) + (c))
#define ANVIL_SIMD_SQRT(a) portable_sqrt(a)
#include "backend/cpu/optimized/simd.inc"
#include "backend/cpu/optimized/elementwise.inc"
#include "backend/cpu/optimized/rows.inc"
#include "backend/cpu/optimized/attention_common.inc"
#include "backend/cpu/optimized/attention.inc"
#undef ANVIL_SIMD_FMADD
#undef ANVIL_SIMD_SQRT

const Kernels kTable = {"generic",         convert,         add,
                        scale,             axpy,            sum_squares,
                        all_finite,        swiglu_forward,  swiglu_backward,
                        adamw,             rmsnorm_forward, rmsnorm_backward,
                        rope,              cross_entropy,   cross_entropy_shard_stats,
                        cross_entropy_shard_backward,       dropout,
                        embedding_backward,
                        attention_forward, attention_backward};

}  // namespace anvil::cpu_opt::generic

#pragma GCC pop_options

namespace anvil::cpu_opt {
const Kernels& generic_kernels() { return generic::kTable; }
}  // namespace anvil::cpu_opt
