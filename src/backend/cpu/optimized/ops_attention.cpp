// OptimizedOps attention: the flash kernels of
// attention.inc over OpenMP tasks. Forward tasks are (batch, kv head, query tile), dealt
// round-robin (static, chunk 1) in serpentine tile order (forward_task in
// attention_common.inc) so the longer causal tiles spread evenly; backward tasks are
// (batch, kv head), each owning its dk/dv and the dq of its query-head group, so no two tasks
// write the same memory. Each thread gets its own slice of one scratch buffer that only grows.
// When q, k, v (and dout) are bf16 and the CPU has AVX512-BF16, the bf16 dot-product kernels
// run instead of the f32 ones.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "backend/cpu/optimized/optimized_ops.h"
#include "backend/cpu/optimized/parallel.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_opt {
namespace {

// Returns the kernels' view of a call Backend has checked.
AttentionArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionParams& params) {
  AttentionArgs a{};
  a.B = q.shape[0];
  a.Tq = q.shape[1];
  a.Tk = k.shape[1];
  a.Hq = q.shape[2];
  a.Hkv = k.shape[2];
  a.D = q.shape[3];
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.out = out.data;
  a.lse = lse.f32();
  a.q_dtype = q.dtype;
  a.k_dtype = k.dtype;
  a.v_dtype = v.dtype;
  a.out_dtype = out.dtype;
  a.doc_ids = params.doc_ids ? params.doc_ids->i32() : nullptr;
  a.doc_len = params.doc_ids ? params.doc_ids->shape[1] : 0;
  a.q_offset = params.q_offset;
  a.k_offset = params.k_offset;
  a.rule = params.mask_rule();
  a.scale = params.scale != 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(a.D));
  return a;
}

// Returns whether every tensor is bf16 (the inputs the bf16 dot-product kernels take).
bool all_bf16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->dtype != DType::bf16) return false;
  return true;
}

}  // namespace

int64_t attention_forward_scratch_floats(const AttentionArgs& a) {
  const int64_t Dp = attention_padded_dim(a.D);
  const int64_t QT = kAttentionQueryTile, KT = kAttentionKeyTile;
  const int64_t group = a.Hq / a.Hkv;
  return group * (2 * QT * Dp + 3 * QT) + QT * Dp + KT * QT + 2 * KT * Dp + QT;
}

int64_t attention_backward_scratch_floats(const AttentionArgs& a) {
  const int64_t Dp = attention_padded_dim(a.D);
  const int64_t QT = kAttentionQueryTile, KT = kAttentionKeyTile;
  const int64_t group = a.Hq / a.Hkv;
  const int64_t padded_queries = (a.Tq + QT - 1) / QT * QT;
  return 5 * group * padded_queries * Dp + 2 * group * padded_queries + 4 * KT * Dp +
         2 * KT * QT + 2 * Dp + QT;
}

void OptimizedOps::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse,
                                     const AttentionParams& params) {
  const AttentionArgs a = attention_args(q, k, v, out, lse, params);
  const int64_t tiles = (a.Tq + kAttentionQueryTile - 1) / kAttentionQueryTile;
  const int64_t tasks = a.B * a.Hkv * tiles;
  if (tasks == 0 || a.D == 0) return;
  const bool bf16 = bf16_attention_ && all_bf16({&q, &k, &v});
  const int64_t floats = bf16 ? bf16_attention_->forward_scratch_floats(a)
                              : attention_forward_scratch_floats(a);
  auto* const run = bf16 ? bf16_attention_->forward : kernels_.attention_forward;
  // Per-thread slices padded to whole cache lines so threads never share one.
  const int64_t per_thread = (floats + 15) / 16 * 16;
  float* base = scratch(attention_scratch_, per_thread * omp_get_max_threads());
  parallel_tasks(tasks,
                 [&](int64_t task) { run(a, task, base + per_thread * omp_get_thread_num()); });
}

void OptimizedOps::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& out, const Tensor& lse,
                                      const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                      const AttentionParams& params) {
  AttentionArgs a = attention_args(q, k, v, out, lse, params);
  a.dout = dout.data;
  a.dq = dq.data;
  a.dk = dk.data;
  a.dv = dv.data;
  a.dout_dtype = dout.dtype;
  a.dq_dtype = dq.dtype;
  a.dk_dtype = dk.dtype;
  a.dv_dtype = dv.dtype;
  const int64_t tasks = a.B * a.Hkv;
  if (tasks == 0 || a.D == 0) return;
  const bool bf16 = bf16_attention_ && all_bf16({&q, &k, &v, &dout});
  const int64_t floats = bf16 ? bf16_attention_->backward_scratch_floats(a)
                              : attention_backward_scratch_floats(a);
  auto* const run = bf16 ? bf16_attention_->backward : kernels_.attention_backward;
  const int64_t per_thread = (floats + 15) / 16 * 16;
  float* base = scratch(attention_scratch_, per_thread * omp_get_max_threads());
  parallel_tasks(tasks,
                 [&](int64_t task) { run(a, task, base + per_thread * omp_get_thread_num()); });
}

void OptimizedOps::attention_merge(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                                   const Tensor& part_lse) {
  const int64_t B = out.shape[0], Tq = out.shape[1], Hq = out.shape[2], D = out.shape[3];
  const float neg_inf = -__builtin_inff();
  // One task per (b, t) row of heads; the merge is memory-bound, so plain loops suffice.
#pragma omp parallel for schedule(static) if (B * Tq > 64)
  for (int64_t bt = 0; bt < B * Tq; ++bt) {
    const int64_t b = bt / Tq, t = bt % Tq;
    for (int64_t h = 0; h < Hq; ++h) {
      float& row_lse = lse.f32()[(b * Hq + h) * Tq + t];
      const float other = part_lse.f32()[(b * Hq + h) * Tq + t];
      if (other == neg_inf) continue;
      const float merged = row_lse == neg_inf ? other
                                              : std::max(row_lse, other) +
                                                    std::log1p(std::exp(-std::abs(row_lse - other)));
      const float keep = row_lse == neg_inf ? 0.0f : std::exp(row_lse - merged);
      const float take = std::exp(other - merged);
      const size_t at = static_cast<size_t>(((b * Tq + t) * Hq + h) * D) * dtype_size(out.dtype);
      void* row = static_cast<char*>(out.data) + at;
      kernels_.scale(row, out.dtype, keep, D);
      kernels_.axpy(take, static_cast<const char*>(part_out.data) + at, out.dtype, row, out.dtype, D);
      row_lse = merged;
    }
  }
}

}  // namespace anvil::cpu_opt
