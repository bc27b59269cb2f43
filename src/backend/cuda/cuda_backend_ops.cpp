// CudaBackend's ops other than matmul: one launcher from cuda_ops.h each (Backend has checked
// the arguments), or the attention router (attention_route.h). Scratch memory comes from the
// backend's grow-only workspace (GrowOnlyScratch, counted as workspace; attention's is the
// router's): the stream orders each reuse after the kernel that used it, and after the first
// step nothing is allocated.
#include <cmath>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cuda/attention_route.h"
#include "backend/cuda/cuda_arrays.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace anvil {

using cuda::in;
using cuda::out;

void CudaBackend::embedding_forward_kernel(const Tensor& ids, const Tensor& table,
                                           const Tensor& o) {
  const int64_t N = ids.shape[0], V = table.shape[0], C = table.shape[1];
  cuda::launch_embedding_forward(ids.i32(), N, in(table), 0, V, C, out(o), stream());
  CUDA_CHECK_LAUNCH("embedding_forward");
}

void CudaBackend::embedding_backward_kernel(const Tensor& ids, const Tensor& dout,
                                            const Tensor& dtable) {
  const int64_t N = ids.shape[0], V = dtable.shape[0], C = dtable.shape[1];
  cuda::launch_embedding_backward(ids.i32(), N, in(dout), C, 0, V, dtable.f32(), stream());
  CUDA_CHECK_LAUNCH("embedding_backward");
}

void CudaBackend::embedding_shard_forward_kernel(const Tensor& ids, const Tensor& table,
                                                 const Tensor& o, int64_t begin) {
  const int64_t N = ids.shape[0], Vs = table.shape[0], C = table.shape[1];
  cuda::launch_embedding_forward(ids.i32(), N, in(table), begin, Vs, C, out(o), stream());
  CUDA_CHECK_LAUNCH("embedding_shard_forward");
}

void CudaBackend::embedding_shard_backward_kernel(const Tensor& ids, const Tensor& dout,
                                                  const Tensor& dtable, int64_t begin) {
  const int64_t N = ids.shape[0], Vs = dtable.shape[0], C = dtable.shape[1];
  cuda::launch_embedding_backward(ids.i32(), N, in(dout), C, begin, Vs, dtable.f32(), stream());
  CUDA_CHECK_LAUNCH("embedding_shard_backward");
}

void CudaBackend::rmsnorm_forward_kernel(const Tensor& x, const Tensor& weight, const Tensor& o,
                                         const Tensor& rstd, float eps) {
  const int64_t N = x.shape[0], C = x.shape[1];
  cuda::launch_rmsnorm_forward(in(x), in(weight), out(o), rstd.f32(), N, C, eps, stream());
  CUDA_CHECK_LAUNCH("rmsnorm_forward");
}

void CudaBackend::add_rmsnorm_forward_kernel(const Tensor& a, const Tensor& b, const Tensor& sum,
                                             const Tensor& weight, const Tensor& o,
                                             const Tensor& rstd, float eps) {
  const int64_t N = sum.shape[0], C = sum.shape[1];
  cuda::launch_add_rmsnorm_forward(in(a), in(b), out(sum), in(weight), out(o), rstd.f32(), N, C,
                                   eps, stream());
  CUDA_CHECK_LAUNCH("add_rmsnorm_forward");
}

void CudaBackend::rmsnorm_backward_kernel(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                          const Tensor& rstd, const Tensor& dx,
                                          const Tensor& dweight, const Tensor* dx_copy) {
  const int64_t N = x.shape[0], C = x.shape[1];
  if (N == 0 || C == 0) return;
  const cuda::RmsnormBackwardPlan plan = cuda::plan_rmsnorm_backward(N, C, sm_count_);
  void* workspace = rmsnorm_scratch_.reserve(*this, plan.workspace_bytes());
  const cuda::MutableArray copy = dx_copy ? out(*dx_copy) : cuda::MutableArray{nullptr, DType::f32};
  cuda::launch_rmsnorm_backward(in(dout), in(x), in(weight), rstd.f32(), out(dx), copy,
                                dweight.f32(), N, C, plan, workspace, rmsnorm_counters_,
                                stream());
  CUDA_CHECK_LAUNCH("rmsnorm_backward");
}

const float* CudaBackend::rope_frequencies(int64_t head_dim, const RopeParams& params) {
  const std::string key =
      fmt::format("{} {} {} {} {}", params.theta, params.scaling_factor, params.low_freq_factor,
                  params.high_freq_factor, params.original_max_position);
  const auto found = rope_frequencies_.find({head_dim, key});
  if (found != rope_frequencies_.end()) return static_cast<const float*>(found->second);
  const std::vector<float> inv_freq = cpu_ref::rope_inv_freq(head_dim, params);
  const size_t bytes = inv_freq.size() * sizeof(float);
  void* device = allocate(bytes, MemoryCategory::workspace);
  staging_->to_device(device, inv_freq.data(), bytes, stream());
  rope_frequencies_.emplace(std::make_pair(head_dim, key), device);
  return static_cast<const float*>(device);
}

void CudaBackend::rope(const char* op, const Tensor& x, const Tensor& o, const Tensor& positions,
                       const RopeParams& params, float direction) {
  const int64_t D = x.shape[3];
  if (x.numel() == 0) return;
  const float* inv_freq = rope_frequencies(D, params);
  cuda::launch_rope(in(x), out(o), positions.i32(), inv_freq, x.shape[0] * x.shape[1],
                    x.shape[2], D, direction, stream());
  CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::rope_forward_kernel(const Tensor& x, const Tensor& o, const Tensor& positions,
                                      const RopeParams& params) {
  rope("rope", x, o, positions, params, 1.0f);
}

void CudaBackend::rope_backward_kernel(const Tensor& dout, const Tensor& dx,
                                       const Tensor& positions, const RopeParams& params) {
  rope("rope_backward", dout, dx, positions, params, -1.0f);
}

void CudaBackend::attention_forward_kernel(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& o, const Tensor& lse,
                                           const AttentionParams& params) {
  if (!attention_) attention_ = std::make_shared<cuda::AttentionRouter>(*this);
  attention_->forward(q, k, v, o, lse, params, stream());
  CUDA_CHECK_LAUNCH("attention_forward");
}

void CudaBackend::attention_backward_kernel(const Tensor& dout, const Tensor& q, const Tensor& k,
                                            const Tensor& v, const Tensor& o, const Tensor& lse,
                                            const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                            const AttentionParams& params) {
  if (!attention_) attention_ = std::make_shared<cuda::AttentionRouter>(*this);
  attention_->backward(dout, q, k, v, o, lse, dq, dk, dv, params, stream());
  CUDA_CHECK_LAUNCH("attention_backward");
}

void CudaBackend::attention_merge_kernel(const Tensor& o, const Tensor& lse, const Tensor& part_out,
                                         const Tensor& part_lse) {
  const int64_t B = o.shape[0], Tq = o.shape[1], Hq = o.shape[2], D = o.shape[3];
  cuda::launch_attention_merge(out(o), lse.f32(), in(part_out), part_lse.f32(), B, Tq, Hq, D,
                               stream());
  CUDA_CHECK_LAUNCH("attention_merge");
}

void CudaBackend::swiglu_forward_kernel(const Tensor& gate, const Tensor& up, const Tensor& o) {
  cuda::launch_swiglu_forward(in(gate), in(up), out(o), gate.numel(), stream());
  CUDA_CHECK_LAUNCH("swiglu_forward");
}

void CudaBackend::swiglu_backward_kernel(const Tensor& dout, const Tensor& gate, const Tensor& up,
                                         const Tensor& dgate, const Tensor& dup) {
  cuda::launch_swiglu_backward(in(dout), in(gate), in(up), out(dgate), out(dup), gate.numel(),
                               stream());
  CUDA_CHECK_LAUNCH("swiglu_backward");
}

void CudaBackend::add_kernel(const Tensor& a, const Tensor& b, const Tensor& o) {
  cuda::launch_add(in(a), in(b), out(o), a.numel(), stream());
  CUDA_CHECK_LAUNCH("add");
}

void CudaBackend::scale_kernel(const Tensor& x, float alpha) {
  cuda::launch_scale(out(x), alpha, x.numel(), stream());
  CUDA_CHECK_LAUNCH("scale");
}

void CudaBackend::axpy_kernel(float alpha, const Tensor& x, const Tensor& y) {
  cuda::launch_axpy(alpha, in(x), out(y), x.numel(), stream());
  CUDA_CHECK_LAUNCH("axpy");
}

void CudaBackend::cast_kernel(const Tensor& src, const Tensor& dst) {
  cuda::launch_cast(in(src), out(dst), src.numel(), stream());
  CUDA_CHECK_LAUNCH("cast");
}

void CudaBackend::cross_entropy_kernel(const Tensor& logits, const Tensor& targets,
                                       const Tensor* loss_mask, int ignore_index,
                                       const Tensor& losses, const Tensor* dlogits,
                                       float grad_scale) {
  const int64_t N = logits.shape[0], V = logits.shape[1];
  const cuda::MutableArray gradient =
      dlogits ? out(*dlogits) : cuda::MutableArray{nullptr, DType::f32};
  cuda::launch_cross_entropy(in(logits), targets.i32(), loss_mask ? loss_mask->f32() : nullptr,
                             ignore_index, losses.f32(), gradient, grad_scale, N, V, stream());
  CUDA_CHECK_LAUNCH("cross_entropy");
}

void CudaBackend::cross_entropy_shard_stats_kernel(const Tensor& logits, const Tensor& targets,
                                                   int ignore_index, int64_t begin,
                                                   const Tensor& stats) {
  const int64_t N = logits.shape[0], Vs = logits.shape[1];
  cuda::launch_cross_entropy_shard_stats(in(logits), targets.i32(), ignore_index, begin,
                                         stats.f32(), N, Vs, stream());
  CUDA_CHECK_LAUNCH("cross_entropy_shard_stats");
}

void CudaBackend::cross_entropy_shard_backward_kernel(const Tensor& logits, const Tensor& targets,
                                                      const Tensor* loss_mask, int ignore_index,
                                                      int64_t begin, const Tensor& lse,
                                                      const Tensor& dlogits, float grad_scale) {
  const int64_t N = logits.shape[0], Vs = logits.shape[1];
  cuda::launch_cross_entropy_shard_backward(in(logits), targets.i32(),
                                            loss_mask ? loss_mask->f32() : nullptr, ignore_index,
                                            begin, lse.f32(), out(dlogits), grad_scale, N, Vs,
                                            stream());
  CUDA_CHECK_LAUNCH("cross_entropy_shard_backward");
}

void CudaBackend::adamw_step_kernel(std::span<const AdamWTensors> sets,
                                    const AdamWParams& params) {
  // One launch for every set (more only past kAdamWSetsPerLaunch sets).
  for (const cuda::AdamWLaunch& launch : cuda::plan_adamw_launches(sets, params)) {
    cuda::launch_adamw(launch, stream());
    CUDA_CHECK_LAUNCH("adamw");
  }
}

void CudaBackend::sum_to_double_kernel(const Tensor& x, const Tensor& result) {
  cuda::launch_sum_to_double(x.f32(), x.numel(), static_cast<double*>(result.data), stream());
  CUDA_CHECK_LAUNCH("sum_to_double");
}

void CudaBackend::dropout_kernel(const Tensor& x, const Tensor& o, float p, uint64_t seed) {
  cuda::launch_dropout(in(x), out(o), p, seed, x.numel(), stream());
  CUDA_CHECK_LAUNCH("dropout");
}

double CudaBackend::sum_squares_kernel(const Tensor& x) {
  if (x.numel() == 0) return 0.0;
  const size_t partial_bytes =
      static_cast<size_t>(cuda::sum_squares_scratch_count()) * sizeof(double);
  auto* partials = static_cast<double*>(reduction_scratch_.reserve(*this, partial_bytes));
  auto* result = static_cast<double*>(scalars_);
  cuda::launch_sum_squares(in(x), x.numel(), partials, result, stream());
  CUDA_CHECK_LAUNCH("sum_squares");
  double sum = 0.0;
  read_back(&sum, result, sizeof(sum));
  return sum;
}

bool CudaBackend::all_finite_kernel(const Tensor& x) {
  if (x.numel() == 0) return true;
  auto* flag = static_cast<int*>(scalars_);
  CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream()));
  cuda::launch_find_nonfinite(in(x), x.numel(), flag, stream());
  CUDA_CHECK_LAUNCH("all_finite");
  int nonfinite = 0;
  read_back(&nonfinite, flag, sizeof(nonfinite));
  return nonfinite == 0;
}

void CudaBackend::accumulate_exact_squares_kernel(const Tensor& x, const Tensor& counters) {
  cuda::launch_accumulate_exact_squares(x.f32(), x.numel(), static_cast<uint64_t*>(counters.data),
                                        stream());
  CUDA_CHECK_LAUNCH("accumulate_exact_squares");
}

}  // namespace anvil
