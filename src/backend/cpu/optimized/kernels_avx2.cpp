// The AVX2 kernel table: the shared kernel sources (simd.inc, elementwise.inc, rows.inc,
// attention.inc) compiled for AVX2 + FMA, 8 f32 lanes, f16 converted by F16C. Only the code
// after the target pragma uses these instructions; headers are included before it, so nothing they
// define inline can leak AVX2 code into other translation units. Selected at run time by
// isa.cpp only when the CPU reports the features.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/optimized/kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2")
// Plain operators must not fuse (FMA only where a kernel asks for it via fmadd), so results
// follow the reference's f32 operation order.
#pragma GCC optimize("fp-contract=off")

namespace anvil::cpu_opt::avx2 {

constexpr int kLanes = 8;
#define ANVIL_SIMD_FMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#define ANVIL_SIMD_SQRT(a) _mm256_sqrt_ps(a)
#define ANVIL_SIMD_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))
#define ANVIL_SIMD_STORE_F16(p, v) \
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
#include "backend/cpu/optimized/simd.inc"
#include "backend/cpu/optimized/elementwise.inc"
#include "backend/cpu/optimized/rows.inc"
#include "backend/cpu/optimized/attention_common.inc"
#include "backend/cpu/optimized/attention.inc"
#undef ANVIL_SIMD_FMADD
#undef ANVIL_SIMD_SQRT
#undef ANVIL_SIMD_LOAD_F16
#undef ANVIL_SIMD_STORE_F16

const Kernels kTable = {"avx2",            convert,         add,
                        scale,             axpy,            sum_squares,
                        all_finite,        swiglu_forward,  swiglu_backward,
                        adamw,             rmsnorm_forward, rmsnorm_backward,
                        rope,              cross_entropy,   cross_entropy_shard_stats,
                        cross_entropy_shard_backward,       dropout,
                        embedding_backward,
                        attention_forward, attention_backward};

}  // namespace anvil::cpu_opt::avx2

#pragma GCC pop_options

namespace anvil::cpu_opt {
const Kernels& avx2_kernels() { return avx2::kTable; }
}  // namespace anvil::cpu_opt

#endif  // __x86_64__
