// OptimizedOps construction and matmul (Backend has checked the arguments): oneDNN or OpenBLAS.
#include <cstring>

#include "backend/cpu/optimized/isa.h"
#include "backend/cpu/optimized/optimized_ops.h"
#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/cpu_info.h"
#include "core/error.h"

namespace anvil::cpu_opt {

// The GEMM library follows the kernel table, so ANVIL_CPU_ISA=avx2 on an AVX-512 machine runs
// what an AVX2-only machine runs (OpenBLAS, bf16 widened to f32). The bf16 attention kernels
// need the AVX-512 table on a CPU with AVX512-BF16.
OptimizedOps::OptimizedOps(Allocator& scratch)
    : scratch_allocator_(scratch),
      kernels_(select_kernels()),
      gemm_(make_gemm(kernels_, scratch)),
      rope_tables_(scratch) {
#if defined(__x86_64__)
  if (std::strcmp(kernels_.isa_name, "avx512") == 0 && cpu_info().avx512_bf16)
    bf16_attention_ = &avx512_bf16_attention_kernels();
#endif
}

float* OptimizedOps::scratch(Buffer& buffer, int64_t floats) {
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  if (bytes > buffer.bytes()) {
    buffer.reset();  // released before the bigger one is taken: never both at once
    buffer = Buffer(scratch_allocator_, bytes, MemoryCategory::workspace);
  }
  return static_cast<float*>(buffer.data());
}

void OptimizedOps::matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                          bool transpose_b, float alpha, float beta) {
  const int rank = a.shape.rank();
  MatmulShape s;
  s.rank3 = rank == 3;
  s.batches = s.rank3 ? a.shape[0] : 1;
  s.shared_b = b.shape.rank() == 2;
  s.M = transpose_a ? a.shape.back(0) : a.shape.back(1);
  s.K = transpose_a ? a.shape.back(1) : a.shape.back(0);
  s.N = transpose_b ? b.shape.back(1) : b.shape.back(0);
  if (s.batches == 0 || s.M == 0 || s.N == 0 || s.K == 0) {
    cpu_ref::matmul(a, b, c, transpose_a, transpose_b, alpha, beta);
    return;
  }
  // A batch of one with a shared b is a plain 2-D product.
  if (s.rank3 && s.batches == 1) s.rank3 = false, s.shared_b = true;
  s.transpose_a = transpose_a;
  s.transpose_b = transpose_b;
  s.ab_dtype = a.dtype;
  s.c_dtype = c.dtype;
  s.alpha = alpha;
  s.beta = beta;
  gemm_->run(s, a.data, b.data, c.data);
}

}  // namespace anvil::cpu_opt
