// OptimizedOps: the "cpu" backend's op implementations. GEMMs go to oneDNN or OpenBLAS,
// whichever goes with the kernel table (gemm.h); every other op (its arguments checked by
// Backend) splits rows across OpenMP threads and runs the SIMD kernel table chosen for this
// CPU (isa.h); f32, bf16 and f16 storage alike, f16 GEMM operands widened to f32. Ids and
// targets are checked by the caller: a bad one reads as a zero row or an ignored target, as
// in the reference. Cases the kernels do not cover (mixed dtypes within SwiGLU, positions
// beyond the RoPE table, empty matrices) run the reference loops, which define the same
// results. Scratch (attention tiles, rmsnorm weight-gradient partials, cross-entropy rows) is
// owned here and only grows, so a steady training step allocates nothing; it comes from the
// backend's allocator, counted as workspace. Not thread-safe: one caller at a time.
#pragma once


#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/optimized/gemm.h"
#include "backend/cpu/optimized/kernels.h"
#include "backend/cpu/optimized/rope_table.h"
#include "core/buffer.h"

namespace anvil::cpu_opt {


class OptimizedOps {
 public:
  // Selects the kernel table (ANVIL_CPU_ISA or the CPU's best) and its GEMM library; scratch
  // comes from `scratch` (the backend, which outlives this object).
  explicit OptimizedOps(Allocator& scratch);

  // Returns the name of the kernel table in use ("avx512", "avx2" or "generic").
  const char* isa_name() const { return kernels_.isa_name; }
  // Returns the GEMM library's name and version.
  std::string gemm_library() const { return gemm_->library(); }

  void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
              bool transpose_b, float alpha, float beta);
  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);
  void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out,
                               int64_t begin);
  void embedding_shard_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                                int64_t begin);
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out,
                       const Tensor& rstd, float eps);
  void add_rmsnorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum,
                           const Tensor& weight, const Tensor& out, const Tensor& rstd,
                           float eps);
  void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                        const Tensor* dx_copy);
  void rope_forward(const Tensor& x, const Tensor& out, const Tensor& positions,
                    const RopeParams& params);
  void rope_backward(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                     const RopeParams& params);
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const AttentionParams& params);
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& dq,
                          const Tensor& dk, const Tensor& dv, const AttentionParams& params);
  void attention_merge(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                       const Tensor& part_lse);
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out);
  void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                       const Tensor& dgate, const Tensor& dup);
  void add(const Tensor& a, const Tensor& b, const Tensor& out);
  void scale(const Tensor& x, float alpha);
  void axpy(float alpha, const Tensor& x, const Tensor& y);
  void cast(const Tensor& src, const Tensor& dst);
  void dropout(const Tensor& x, const Tensor& out, float p, uint64_t seed);
  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                     int ignore_index, const Tensor& losses, const Tensor* dlogits,
                     float grad_scale);
  void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, int ignore_index,
                                 int64_t begin, const Tensor& stats);
  void cross_entropy_shard_backward(const Tensor& logits, const Tensor& targets,
                                    const Tensor* loss_mask, int ignore_index, int64_t begin,
                                    const Tensor& lse, const Tensor& dlogits, float grad_scale);
  void adamw_step(std::span<const AdamWTensors> sets, const AdamWParams& params);
  void sum_to_double(const Tensor& x, const Tensor& result);
  double sum_squares(const Tensor& x);
  bool all_finite(const Tensor& x);

 private:
  // Returns at least `floats` floats of scratch in `buffer`, growing it when needed.
  float* scratch(Buffer& buffer, int64_t floats);
  // Runs the embedding scatter-add split by columns across threads.
  void scatter_rows(const EmbeddingBackwardArgs& args);
  void rotate(const Tensor& in, const Tensor& out, const Tensor& positions,
              const RopeParams& params, float sin_sign);

  Allocator& scratch_allocator_;
  const Kernels& kernels_;
  // Non-null when the AVX-512 table runs on a CPU with AVX512-BF16.
  const Bf16AttentionKernels* bf16_attention_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  RopeTables rope_tables_;
  Buffer attention_scratch_;
  Buffer dweight_partials_;
  Buffer cross_entropy_rows_;
};

}  // namespace anvil::cpu_opt
