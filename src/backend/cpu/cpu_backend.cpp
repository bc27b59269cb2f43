// CpuBackend: memory is plain aligned host memory and copies are memcpy. Every op forwards to
// cpu/optimized in optimized mode and to cpu/reference in reference mode.
#include "backend/cpu/cpu_backend.h"

#include <fmt/ranges.h>

#include <cstring>

#include "backend/cpu/optimized/isa.h"
#include "backend/cpu/reference/reference_ops.h"
#include "backend/registry.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "core/trace.h"

namespace anvil {
CpuBackend::CpuBackend(bool reference) : reference_(reference) {
  if (!reference_) optimized_ = std::make_unique<cpu_opt::OptimizedOps>(*this);
}

void CpuBackend::copy_from_host_kernel(const Tensor& dst, const void* src) {
  TraceSpan span("copy to device", "copy");
  span.arg("bytes", dst.nbytes());
  std::memcpy(dst.data, src, dst.nbytes());
}

void CpuBackend::copy_to_host_kernel(void* dst, const Tensor& src) {
  TraceSpan span("copy to host", "copy");
  span.arg("bytes", src.nbytes());
  std::memcpy(dst, src.data, src.nbytes());
}

void CpuBackend::copy_kernel(const Tensor& dst, const Tensor& src) {
  std::memmove(dst.data, src.data, dst.nbytes());
}

void CpuBackend::fill_zero_kernel(const Tensor& t) { std::memset(t.data, 0, t.nbytes()); }

void CpuBackend::matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                               bool transpose_b, float alpha, float beta) {
  if (optimized_) return optimized_->matmul(a, b, c, transpose_a, transpose_b, alpha, beta);
  cpu_ref::matmul(a, b, c, transpose_a, transpose_b, alpha, beta);
}

void CpuBackend::embedding_forward_kernel(const Tensor& ids, const Tensor& table,
                                          const Tensor& out) {
  if (optimized_) return optimized_->embedding_forward(ids, table, out);
  cpu_ref::embedding_forward(ids, table, out);
}

void CpuBackend::embedding_backward_kernel(const Tensor& ids, const Tensor& dout,
                                           const Tensor& dtable) {
  if (optimized_) return optimized_->embedding_backward(ids, dout, dtable);
  cpu_ref::embedding_backward(ids, dout, dtable);
}

void CpuBackend::embedding_shard_forward_kernel(const Tensor& ids, const Tensor& table,
                                                const Tensor& out, int64_t begin) {
  if (optimized_) return optimized_->embedding_shard_forward(ids, table, out, begin);
  cpu_ref::embedding_shard_forward(ids, table, out, begin);
}

void CpuBackend::embedding_shard_backward_kernel(const Tensor& ids, const Tensor& dout,
                                                 const Tensor& dtable, int64_t begin) {
  if (optimized_) return optimized_->embedding_shard_backward(ids, dout, dtable, begin);
  cpu_ref::embedding_shard_backward(ids, dout, dtable, begin);
}

void CpuBackend::rmsnorm_forward_kernel(const Tensor& x, const Tensor& weight, const Tensor& out,
                                        const Tensor& rstd, float eps) {
  if (optimized_) return optimized_->rmsnorm_forward(x, weight, out, rstd, eps);
  cpu_ref::rmsnorm_forward(x, weight, out, rstd, eps);
}

void CpuBackend::add_rmsnorm_forward_kernel(const Tensor& a, const Tensor& b, const Tensor& sum,
                                            const Tensor& weight, const Tensor& out,
                                            const Tensor& rstd, float eps) {
  if (optimized_) return optimized_->add_rmsnorm_forward(a, b, sum, weight, out, rstd, eps);
  cpu_ref::add_rmsnorm_forward(a, b, sum, weight, out, rstd, eps);
}

void CpuBackend::rmsnorm_backward_kernel(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                         const Tensor& rstd, const Tensor& dx,
                                         const Tensor& dweight, const Tensor* dx_copy) {
  if (optimized_) return optimized_->rmsnorm_backward(dout, x, weight, rstd, dx, dweight, dx_copy);
  cpu_ref::rmsnorm_backward(dout, x, weight, rstd, dx, dweight, dx_copy);
}

void CpuBackend::rope_forward_kernel(const Tensor& x, const Tensor& out, const Tensor& positions,
                                     const RopeParams& params) {
  if (optimized_) return optimized_->rope_forward(x, out, positions, params);
  cpu_ref::rope_forward(x, out, positions, params);
}

void CpuBackend::rope_backward_kernel(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                                      const RopeParams& params) {
  if (optimized_) return optimized_->rope_backward(dout, dx, positions, params);
  cpu_ref::rope_backward(dout, dx, positions, params);
}

void CpuBackend::attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& out, const Tensor& lse,
                                          const AttentionParams& params) {
  if (optimized_) return optimized_->attention_forward(q, k, v, out, lse, params);
  cpu_ref::attention_forward(q, k, v, out, lse, params);
}

void CpuBackend::attention_backward_kernel(const Tensor& dout, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const Tensor& out, const Tensor& lse,
                                           const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                           const AttentionParams& params) {
  if (optimized_)
    return optimized_->attention_backward(dout, q, k, v, out, lse, dq, dk, dv, params);
  cpu_ref::attention_backward(dout, q, k, v, out, lse, dq, dk, dv, params);
}

void CpuBackend::attention_merge_kernel(const Tensor& out, const Tensor& lse,
                                        const Tensor& part_out, const Tensor& part_lse) {
  if (optimized_) return optimized_->attention_merge(out, lse, part_out, part_lse);
  cpu_ref::attention_merge(out, lse, part_out, part_lse);
}

void CpuBackend::swiglu_forward_kernel(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (optimized_) return optimized_->swiglu_forward(gate, up, out);
  cpu_ref::swiglu_forward(gate, up, out);
}

void CpuBackend::swiglu_backward_kernel(const Tensor& dout, const Tensor& gate, const Tensor& up,
                                        const Tensor& dgate, const Tensor& dup) {
  if (optimized_) return optimized_->swiglu_backward(dout, gate, up, dgate, dup);
  cpu_ref::swiglu_backward(dout, gate, up, dgate, dup);
}

void CpuBackend::add_kernel(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (optimized_) return optimized_->add(a, b, out);
  cpu_ref::add(a, b, out);
}

void CpuBackend::scale_kernel(const Tensor& x, float alpha) {
  if (optimized_) return optimized_->scale(x, alpha);
  cpu_ref::scale(x, alpha);
}

void CpuBackend::axpy_kernel(float alpha, const Tensor& x, const Tensor& y) {
  if (optimized_) return optimized_->axpy(alpha, x, y);
  cpu_ref::axpy(alpha, x, y);
}

void CpuBackend::dropout_kernel(const Tensor& x, const Tensor& out, float p, uint64_t seed) {
  if (optimized_) return optimized_->dropout(x, out, p, seed);
  cpu_ref::dropout(x, out, p, seed);
}

void CpuBackend::cast_kernel(const Tensor& src, const Tensor& dst) {
  if (optimized_) return optimized_->cast(src, dst);
  cpu_ref::cast(src, dst);
}

void CpuBackend::cross_entropy_kernel(const Tensor& logits, const Tensor& targets,
                                      const Tensor* loss_mask, int ignore_index,
                                      const Tensor& losses, const Tensor* dlogits,
                                      float grad_scale) {
  if (optimized_)
    return optimized_->cross_entropy(logits, targets, loss_mask, ignore_index, losses, dlogits,
                                     grad_scale);
  cpu_ref::cross_entropy(logits, targets, loss_mask, ignore_index, losses, dlogits, grad_scale);
}

void CpuBackend::cross_entropy_shard_stats_kernel(const Tensor& logits, const Tensor& targets,
                                                  int ignore_index, int64_t begin,
                                                  const Tensor& stats) {
  if (optimized_)
    return optimized_->cross_entropy_shard_stats(logits, targets, ignore_index, begin, stats);
  cpu_ref::cross_entropy_shard_stats(logits, targets, ignore_index, begin, stats);
}

void CpuBackend::cross_entropy_shard_backward_kernel(const Tensor& logits, const Tensor& targets,
                                                     const Tensor* loss_mask, int ignore_index,
                                                     int64_t begin, const Tensor& lse,
                                                     const Tensor& dlogits, float grad_scale) {
  if (optimized_)
    return optimized_->cross_entropy_shard_backward(logits, targets, loss_mask, ignore_index,
                                                    begin, lse, dlogits, grad_scale);
  cpu_ref::cross_entropy_shard_backward(logits, targets, loss_mask, ignore_index, begin, lse,
                                        dlogits, grad_scale);
}

void CpuBackend::adamw_step_kernel(std::span<const AdamWTensors> sets,
                                   const AdamWParams& params) {
  if (optimized_) return optimized_->adamw_step(sets, params);
  cpu_ref::adamw_step(sets, params);
}

void CpuBackend::sum_to_double_kernel(const Tensor& x, const Tensor& result) {
  if (optimized_) return optimized_->sum_to_double(x, result);
  cpu_ref::sum_to_double(x, result);
}

double CpuBackend::sum_squares_kernel(const Tensor& x) {
  return optimized_ ? optimized_->sum_squares(x) : cpu_ref::sum_squares(x);
}

bool CpuBackend::all_finite_kernel(const Tensor& x) {
  return optimized_ ? optimized_->all_finite(x) : cpu_ref::all_finite(x);
}

void CpuBackend::accumulate_exact_squares_kernel(const Tensor& x, const Tensor& counters) {
  add_squares_to_digit_counters(x.f32(), x.numel(), exact_counters(counters));
}

std::unique_ptr<Backend> make_cpu_backend(bool reference) {
  return std::make_unique<CpuBackend>(reference);
}

std::string describe_cpu_backend() {
  const CpuInfo& cpu = cpu_info();
  std::string mode;
  try {
    const cpu_opt::OptimizedOps optimized(HostAllocator::instance());
    mode = fmt::format("optimized mode ({} GEMMs, {} kernels; kernel tables this CPU runs: {} "
                       "(ANVIL_CPU_ISA picks one); cpu-ref forces the reference loops)",
                       optimized.gemm_library(), optimized.isa_name(),
                       fmt::join(cpu_opt::supported_kernel_tables(), " "));
  } catch (const Error& e) {
    mode = fmt::format("optimized mode unavailable ({})", e.what());
  }
  return fmt::format("cpu: {}, {}, {} cores, {}", mode, cpu.model_name, cpu.cores,
                     cpu.feature_list());
}

void register_cpu_backends(BackendRegistry& registry) {
  registry.add({"cpu", describe_cpu_backend, [] { return make_cpu_backend(false); }});
  // The reference loops have no line of their own: the cpu line names them.
  registry.add({"cpu-ref", [] { return std::string("cpu-ref: the reference loops of cpu"); },
                [] { return make_cpu_backend(true); }});
}

}  // namespace anvil
