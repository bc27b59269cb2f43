// The library-independent part of the CPU GEMM (gemm.h): the choice of library per kernel
// table and the widened path for bf16 and f16 operands a library cannot multiply natively.
#include "backend/cpu/optimized/gemm.h"

#include <cstring>

namespace anvil::cpu_opt {
namespace {

// Returns `count` f32 values of `src` (bf16 or f16) widened into `buffer` (grown when too
// small).
float* widen(const Kernels& kernels, Allocator& allocator, Buffer& buffer, const void* src,
             DType dtype, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  if (bytes > buffer.bytes()) {
    buffer.reset();  // released before the bigger one is taken: never both at once
    buffer = Buffer(allocator, bytes, MemoryCategory::workspace);
  }
  if (src != nullptr) kernels.convert(src, dtype, buffer.data(), DType::f32, count);
  return static_cast<float*>(buffer.data());
}

}  // namespace

void Gemm::run(const MatmulShape& s, const void* a, const void* b, void* c) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (native(s)) {
    run_native(s, a, b, c);
    return;
  }
  MatmulShape wide = s;
  wide.ab_dtype = DType::f32;
  wide.c_dtype = DType::f32;
  const int64_t a_count = s.batches * s.M * s.K;
  const int64_t b_count = (s.shared_b ? 1 : s.batches) * s.K * s.N;
  const int64_t c_count = s.batches * s.M * s.N;
  const bool wide_ab = s.ab_dtype == DType::f32;
  const float* a32 = wide_ab ? static_cast<const float*>(a)
                             : widen(kernels_, scratch_, widened_a_, a, s.ab_dtype, a_count);
  const float* b32 = wide_ab ? static_cast<const float*>(b)
                             : widen(kernels_, scratch_, widened_b_, b, s.ab_dtype, b_count);
  if (s.c_dtype == DType::f32) {
    run_native(wide, a32, b32, c);
    return;
  }
  // beta == 0 must not read c (it may hold NaN): then the f32 copy is not filled from it.
  float* c32 =
      widen(kernels_, scratch_, widened_c_, s.beta != 0.0f ? c : nullptr, s.c_dtype, c_count);
  run_native(wide, a32, b32, c32);
  kernels_.convert(c32, DType::f32, c, s.c_dtype, c_count);
}

std::unique_ptr<Gemm> make_gemm(const Kernels& kernels, Allocator& scratch) {
  settle_openblas_threads();
  if (std::strcmp(kernels.isa_name, "avx512") == 0) return make_onednn_gemm(kernels, scratch);
  return make_openblas_gemm(kernels, scratch);
}

}  // namespace anvil::cpu_opt
