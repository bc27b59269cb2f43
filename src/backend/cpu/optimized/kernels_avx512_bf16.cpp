// The AVX512-BF16 attention kernels: attention on bf16 inputs with vdpbf16ps pair dot
// products (attention_bf16.inc), sharing blocks, masks and softmax with the f32 kernels
// (attention_common.inc). Compiled for AVX-512F/BW/VL + AVX512-BF16 after every #include, like
// kernels_avx512.cpp; used only when the CPU reports AVX512-BF16 (optimized_ops.cpp checks).
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/optimized/kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi2")
// Plain operators must not fuse (FMA only where a kernel asks for it via fmadd).
#pragma GCC optimize("fp-contract=off")

namespace anvil::cpu_opt::avx512_bf16 {

constexpr int kLanes = 16;
#define ANVIL_SIMD_FMADD(a, b, c) _mm512_fmadd_ps(a, b, c)
#define ANVIL_SIMD_SQRT(a) _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xffff), a)
#define ANVIL_SIMD_ROUND(a) \
  _mm512_maskz_roundscale_ps(static_cast<__mmask16>(0xffff), a, _MM_FROUND_TO_NEAREST_INT)
#define ANVIL_SIMD_SCALEF(a, n) _mm512_maskz_scalef_ps(static_cast<__mmask16>(0xffff), a, n)
#include "backend/cpu/optimized/simd.inc"
#include "backend/cpu/optimized/attention_common.inc"
#include "backend/cpu/optimized/attention_bf16.inc"
#undef ANVIL_SIMD_FMADD
#undef ANVIL_SIMD_SQRT
#undef ANVIL_SIMD_ROUND
#undef ANVIL_SIMD_SCALEF

const Bf16AttentionKernels kTable = {forward_scratch_floats, backward_scratch_floats, forward,
                                     backward};

}  // namespace anvil::cpu_opt::avx512_bf16

#pragma GCC pop_options

namespace anvil::cpu_opt {
const Bf16AttentionKernels& avx512_bf16_attention_kernels() { return avx512_bf16::kTable; }
}  // namespace anvil::cpu_opt

#endif  // __x86_64__
