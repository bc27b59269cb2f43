// GEMM for the optimized CPU backend through oneDNN's matmul primitive (the library choice is
// measured in docs/performance.md). One primitive per distinct (shape, transposes, dtypes,
// alpha, beta) is created on first use and cached with its memory objects, so the steady
// state creates nothing: a call binds the data pointers and executes. Transposes and batches
// are expressed as strides and broadcast dims, never as copies. The scratchpad is ours (user
// mode), one buffer sized for the largest cached primitive. bf16 inputs accumulate in f32
// (AVX512-BF16 vdpbf16ps where the CPU has it); where oneDNN has no bf16 kernel for the CPU,
// the operands are widened to f32 and the f32 primitive runs instead, with the same results.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/cpu/optimized/kernels.h"

namespace anvil::cpu_opt {

// A validated matmul: c (P, M, N) = alpha op(a) op(b) + beta c; b is one matrix when shared.
struct MatmulShape {
  int64_t batches = 1;
  bool rank3 = false;
  bool shared_b = false;
  int64_t M = 0, K = 0, N = 0;
  bool transpose_a = false, transpose_b = false;
  DType ab_dtype = DType::f32, c_dtype = DType::f32;
  float alpha = 1.0f, beta = 0.0f;
};

class OneDnnGemm {
 public:
  // `kernels` converts operands on the f32 fallback path; `emulate_bf16` forces that path.
  OneDnnGemm(const Kernels& kernels, bool emulate_bf16);
  ~OneDnnGemm();
  OneDnnGemm(const OneDnnGemm&) = delete;
  OneDnnGemm& operator=(const OneDnnGemm&) = delete;

  // Runs the matmul on host pointers (M, N, K all > 0). Throws anvil::Error on a library error.
  void run(const MatmulShape& shape, const void* a, const void* b, void* c);
  // Returns the number of cached primitives (for tests and the benchmark).
  size_t cached_primitives() const;
  // Returns "oneDNN 2.6.3"-style text naming the library and its version.
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::cpu_opt
