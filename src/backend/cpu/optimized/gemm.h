// GEMM for the optimized CPU backend, behind one small interface with two libraries (the
// choice is measured in docs/performance.md): oneDNN's matmul primitive alongside the AVX-512
// kernel table, and OpenBLAS alongside the AVX2 and generic tables. Both keep the steady
// state free of heap allocations: oneDNN's cached primitives run on our scratchpad, and
// OpenBLAS works in its own buffer pool (mapped once). oneDNN's AVX2 matmul cannot: it is its
// gemm driver, which mallocs its packing buffers on every call. Transposes and batches are
// strides, never copies. bf16 operands accumulate in f32; where a library has no bf16 kernel
// for the CPU, they are widened to f32 into buffers owned here (grown, never shrunk) and the
// f32 product runs instead, with the same results. f16 operands always take that widened path
// (oneDNN's f16 matmul needs AVX512-FP16 or AMX, OpenBLAS has none): exact widening, f32
// accumulation, one rounding of c to f16. Those buffers and oneDNN's scratchpad come
// from the backend's allocator, counted as workspace.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "backend/cpu/optimized/kernels.h"
#include "core/buffer.h"

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

class Gemm {
 public:
  // `kernels` converts bf16 and f16 operands on the widened path; `scratch` (the backend) provides
  // the widened copies and any library scratchpad.
  Gemm(const Kernels& kernels, Allocator& scratch) : kernels_(kernels), scratch_(scratch) {}
  virtual ~Gemm() = default;
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Runs the matmul on host pointers (M, N, K all > 0). Throws anvil::Error on a library error.
  void run(const MatmulShape& shape, const void* a, const void* b, void* c);
  // Returns "oneDNN 2.6.3"-style text naming the library and its version.
  virtual std::string library() const = 0;

 protected:
  // Returns whether run_native multiplies these dtypes itself (f32 operands always).
  virtual bool native(const MatmulShape& shape) = 0;
  virtual void run_native(const MatmulShape& shape, const void* a, const void* b, void* c) = 0;
  // Returns the allocator of scratch memory (counted as the backend's workspace).
  Allocator& scratch_allocator() const { return scratch_; }

 private:
  const Kernels& kernels_;
  Allocator& scratch_;
  // f32 copies of bf16 or f16 operands (a, b, c) on the widened path.
  Buffer widened_a_, widened_b_, widened_c_;
  std::mutex mutex_;
};

// Returns the GEMM that goes with a kernel table: oneDNN for "avx512", OpenBLAS otherwise.
std::unique_ptr<Gemm> make_gemm(const Kernels& kernels, Allocator& scratch);
std::unique_ptr<Gemm> make_onednn_gemm(const Kernels& kernels, Allocator& scratch);
std::unique_ptr<Gemm> make_openblas_gemm(const Kernels& kernels, Allocator& scratch);
// Holds OpenBLAS at one thread (we thread it ourselves) once its own thread pool, started when
// the library loads (one thread per core unless OPENBLAS_NUM_THREADS says otherwise), has
// mapped its buffers: each pool thread maps a 128 MiB packing buffer as it starts, in its own
// time, so without this a memory check could run before or after that address space is
// taken. Every table calls it (the library is loaded whichever GEMM runs); once per process.
void settle_openblas_threads();

}  // namespace anvil::cpu_opt
