// The CPU backend: host memory (64-byte aligned) and the ops. It runs in one of two modes:
// reference ("cpu-ref"), the plain loops of cpu/reference that define every op, and optimized
// ("cpu"): oneDNN GEMMs plus SIMD/OpenMP kernels (cpu/optimized), checked against the
// reference by the conformance suite. Each method is the single place where its op chooses
// between the two.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/optimized/optimized_ops.h"

namespace anvil {

class CpuBackend final : public Backend {
 public:
  // Creates the backend; optimized mode selects its kernels here (see cpu/optimized/isa.h).
  explicit CpuBackend(bool reference);

  std::string name() const override { return reference_ ? "cpu-ref" : "cpu"; }
  // Both modes run f16 activations: the reference loops read and write it like any float
  // dtype, the optimized kernels widen it to f32 (F16C where the table has it).
  bool supports_compute_dtype(DType dtype) const override {
    return Backend::supports_compute_dtype(dtype) || dtype == DType::f16;
  }
  // Returns whether this instance forces the reference loops.
  bool reference() const { return reference_; }
  // Returns the optimized ops (null in reference mode).
  cpu_opt::OptimizedOps* optimized() const { return optimized_.get(); }

  Device device() const override { return Device{}; }

  void synchronize() override {}

 protected:
  void copy_from_host_kernel(const Tensor& dst, const void* src) override;
  void copy_to_host_kernel(void* dst, const Tensor& src) override;
  void copy_kernel(const Tensor& dst, const Tensor& src) override;
  void fill_zero_kernel(const Tensor& t) override;
  void matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                     bool transpose_b, float alpha, float beta) override;
  void embedding_forward_kernel(const Tensor& ids, const Tensor& table, const Tensor& out) override;
  void embedding_backward_kernel(const Tensor& ids, const Tensor& dout,
                                 const Tensor& dtable) override;
  void embedding_shard_forward_kernel(const Tensor& ids, const Tensor& table, const Tensor& out,
                                      int64_t begin) override;
  void embedding_shard_backward_kernel(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                                       int64_t begin) override;
  void rmsnorm_forward_kernel(const Tensor& x, const Tensor& weight, const Tensor& out,
                              const Tensor& rstd, float eps) override;
  void add_rmsnorm_forward_kernel(const Tensor& a, const Tensor& b, const Tensor& sum,
                                  const Tensor& weight, const Tensor& out, const Tensor& rstd,
                                  float eps) override;
  void rmsnorm_backward_kernel(const Tensor& dout, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                               const Tensor* dx_copy) override;
  void rope_forward_kernel(const Tensor& x, const Tensor& out, const Tensor& positions,
                           const RopeParams& params) override;
  void rope_backward_kernel(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                            const RopeParams& params) override;
  void attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse,
                                const AttentionParams& params) override;
  void attention_backward_kernel(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const AttentionParams& params) override;
  void attention_merge_kernel(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                              const Tensor& part_lse) override;
  void swiglu_forward_kernel(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void swiglu_backward_kernel(const Tensor& dout, const Tensor& gate, const Tensor& up,
                              const Tensor& dgate, const Tensor& dup) override;
  void add_kernel(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void scale_kernel(const Tensor& x, float alpha) override;
  void axpy_kernel(float alpha, const Tensor& x, const Tensor& y) override;
  void cast_kernel(const Tensor& src, const Tensor& dst) override;
  void dropout_kernel(const Tensor& x, const Tensor& out, float p, uint64_t seed) override;
  void cross_entropy_kernel(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                            int ignore_index, const Tensor& losses, const Tensor* dlogits,
                            float grad_scale) override;
  void cross_entropy_shard_stats_kernel(const Tensor& logits, const Tensor& targets,
                                        int ignore_index, int64_t begin,
                                        const Tensor& stats) override;
  void cross_entropy_shard_backward_kernel(const Tensor& logits, const Tensor& targets,
                                           const Tensor* loss_mask, int ignore_index, int64_t begin,
                                           const Tensor& lse, const Tensor& dlogits,
                                           float grad_scale) override;
  void adamw_step_kernel(std::span<const AdamWTensors> sets,
                         const AdamWParams& params) override;
  void sum_to_double_kernel(const Tensor& x, const Tensor& result) override;
  double sum_squares_kernel(const Tensor& x) override;
  bool all_finite_kernel(const Tensor& x) override;
  void accumulate_exact_squares_kernel(const Tensor& x, const Tensor& counters) override;

 protected:
  // Host memory (the CPU's device memory), counted by Allocator.
  void* do_allocate(size_t bytes) override { return allocate_host_memory(bytes); }
  void do_deallocate(void* ptr, size_t) override { free_host_memory(ptr); }

 private:
  bool reference_;
  std::unique_ptr<cpu_opt::OptimizedOps> optimized_;
};

}  // namespace anvil
