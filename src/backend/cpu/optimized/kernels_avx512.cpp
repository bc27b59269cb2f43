// The AVX-512 kernel table: the shared kernel sources (simd.inc, elementwise.inc, rows.inc,
// attention.inc) compiled for AVX-512F/BW/VL + FMA, 16 f32 lanes, f16 converted by
// vcvtph2ps / vcvtps2ph. Only the code after the
// target pragma uses these instructions; headers are included before it, so nothing they
// define inline can leak AVX-512 code into other translation units. Selected at run time by
// isa.cpp only when the CPU reports the features.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/optimized/kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")
// Plain operators must not fuse (FMA only where a kernel asks for it via fmadd), so results
// follow the reference's f32 operation order.
#pragma GCC optimize("fp-contract=off")

namespace anvil::cpu_opt::avx512 {

constexpr int kLanes = 16;
#define ANVIL_SIMD_FMADD(a, b, c) _mm512_fmadd_ps(a, b, c)
#define ANVIL_SIMD_SQRT(a) _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xffff), a)
#define ANVIL_SIMD_ROUND(a) \
  _mm512_maskz_roundscale_ps(static_cast<__mmask16>(0xffff), a, _MM_FROUND_TO_NEAREST_INT)
#define ANVIL_SIMD_SCALEF(a, n) _mm512_maskz_scalef_ps(static_cast<__mmask16>(0xffff), a, n)
#define ANVIL_SIMD_LOAD_F16(p) \
  _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))
#define ANVIL_SIMD_STORE_F16(p, v)                  \
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), \
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#include "backend/cpu/optimized/simd.inc"
#include "backend/cpu/optimized/elementwise.inc"
#include "backend/cpu/optimized/rows.inc"
#include "backend/cpu/optimized/attention_common.inc"
#include "backend/cpu/optimized/attention.inc"
#undef ANVIL_SIMD_FMADD
#undef ANVIL_SIMD_SQRT
#undef ANVIL_SIMD_ROUND
#undef ANVIL_SIMD_SCALEF
#undef ANVIL_SIMD_LOAD_F16
#undef ANVIL_SIMD_STORE_F16

const Kernels kTable = {"avx512",          convert,         add,
                        scale,             axpy,            sum_squares,
                        all_finite,        swiglu_forward,  swiglu_backward,
                        adamw,             rmsnorm_forward, rmsnorm_backward,
                        rope,              cross_entropy,   cross_entropy_shard_stats,
                        cross_entropy_shard_backward,       dropout,
                        embedding_backward,
                        attention_forward, attention_backward};

}  // namespace anvil::cpu_opt::avx512

#pragma GCC pop_options

namespace anvil::cpu_opt {
const Kernels& avx512_kernels() { return avx512::kTable; }
}  // namespace anvil::cpu_opt

#endif  // __x86_64__
