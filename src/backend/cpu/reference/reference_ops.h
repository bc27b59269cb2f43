// The reference ops: plain loops that are the living definition of every Backend op. Every
// other backend (and the CPU's optimized mode) is tested against these, so they favour being
// obviously correct over being fast. Shapes, dtypes and accumulation rules are those of
// backend/backend.h; the choices that header leaves open are pinned down here:
//   - element math is f32; long sums (dot products, row statistics, softmax denominators,
//     gradient accumulation) run in double and round once when stored;
//   - 16-bit storage widens exactly on load and rounds to nearest even on store;
//   - every argument is checked (host device, dtype, shape, index ranges) before any output is
//     written, and a failure throws anvil::Error prefixed with the op ("[embedding] ...").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace anvil::cpu_ref {

// c = alpha * op(a) @ op(b) + beta * c (see Backend::matmul). With beta == 0, c is not read,
// so an uninitialized c (even NaN) is simply overwritten, as in BLAS.
void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
            bool transpose_b, float alpha, float beta);

// out (N, C) = table (V, C)[ids]; throws for an id outside [0, V) before writing anything.
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
// dtable (V, C) f32 += rows of dout (N, C), added in row order (deterministic).
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);
// out (N, C) = table (Vs, C)[id - begin] for ids in [begin, begin + Vs), 0 for other ids;
// throws for a negative id before writing anything.
void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out,
                             int64_t begin);
// dtable (Vs, C) f32 += the rows of dout whose ids lie in the shard, added in row order.
void embedding_shard_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable,
                              int64_t begin);

// out = weight * (x * rstd) with rstd = 1 / sqrt(mean(x^2) + eps), as Hugging Face computes it.
void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& rstd,
                     float eps);
// sum = a + b (as add), then rmsnorm_forward of sum: the definition of the fused op.
void add_rmsnorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum,
                         const Tensor& weight, const Tensor& out, const Tensor& rstd, float eps);
// dx += rstd * (g - x * rstd^2 * mean(g * x)) with g = dout * weight; dweight += sum dout*x*rstd;
// dx_copy (when given) = the updated dx in its own dtype.
void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                      const Tensor* dx_copy);

// Returns the D/2 inverse frequencies RoPE uses for head_dim D, computed in f32 step by step as
// Hugging Face transformers does (default and "llama3" rope types), so angles match PyTorch.
std::vector<float> rope_inv_freq(int64_t head_dim, const RopeParams& params);
// Rotates pairs (i, i + D/2) by angle pos * inv_freq[i]; the angle, cos and sin are f32 values.
void rope_forward(const Tensor& x, const Tensor& out, const Tensor& positions,
                  const RopeParams& params);
// Applies the inverse rotation (the transpose) to dout.
void rope_backward(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                   const RopeParams& params);

// The key at absolute position s (key row s - k_offset) is visible from the query at t (query
// row t - q_offset) when position_visible(params.mask_rule(), t, s) holds (causal, window,
// strided/lines segments, sinks: backend/attention_mask.h) and doc_ids[t] == doc_ids[s] (doc
// mask). Scores and softmax are f32 values with double sums; lse is f32.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse, const AttentionParams& params);
// Flash-attention backward from the saved lse: P = exp(S - lse), D_t = dout_t . out_t,
// dS = P * (dP - D), dq = scale dS k, dk = scale dS^T q, dv = P^T dout. Uses out as stored.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const AttentionParams& params);
// Folds part_out/part_lse (another key block's attention of the same queries) into out/lse.
void attention_merge(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                     const Tensor& part_lse);

// out = silu(gate) * up with silu(g) = g / (1 + exp(-g)).
void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out);
// dgate = dout * up * sigmoid(g) * (1 + g * (1 - sigmoid(g))), dup = dout * silu(g).
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                     const Tensor& dgate, const Tensor& dup);

// out = a + b elementwise; all three share a shape, each may be f32, bf16 or f16.
void add(const Tensor& a, const Tensor& b, const Tensor& out);
// x *= alpha.
void scale(const Tensor& x, float alpha);
// y += alpha * x; x and y share a shape, not necessarily a dtype.
void axpy(float alpha, const Tensor& x, const Tensor& y);
// dst = src converted through f32 (exact widening, then round to nearest even).
void cast(const Tensor& src, const Tensor& dst);

// out = x * keep(i) * (1.0f / (1.0f - p)) with keep(i) = dropout_keep(seed, i, p) of
// core/counter_hash.h, i the flat index; dropped elements are 0. out may alias x.
void dropout(const Tensor& x, const Tensor& out, float p, uint64_t seed);

// Per row: logp = (x - max) - log(sum exp(x - max)); losses = -logp[target] * mask, with
// ignored rows 0; dlogits = (exp(logp) - onehot) * mask * grad_scale, computed after the row's
// loss so dlogits may alias logits. Targets other than ignore_index must lie in [0, V).
void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                   int ignore_index, const Tensor& losses, const Tensor* dlogits,
                   float grad_scale);
// Per row of the shard's columns: stats = (f32 max m, sum exp(x - m) in double rounded once,
// x[target - begin] when the target is a column of the shard, else 0). Targets must be
// ignore_index or >= 0.
void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, int ignore_index,
                               int64_t begin, const Tensor& stats);
// dlogits = (exp(x - lse) - onehot(target - begin)) * mask * grad_scale in f32, 0 for ignored
// rows; a row is read before it is written, so dlogits may alias logits.
void cross_entropy_shard_backward(const Tensor& logits, const Tensor& targets,
                                  const Tensor* loss_mask, int ignore_index, int64_t begin,
                                  const Tensor& lse, const Tensor& dlogits, float grad_scale);

// torch.optim.AdamW's single-tensor step, with its order of f32 operations (see adamw.cpp),
// on each set in turn.
void adamw_step(std::span<const AdamWTensors> sets, const AdamWParams& params);

// Writes the sum of x (f32), added in element order in double, into result (u32 (2)).
void sum_to_double(const Tensor& x, const Tensor& result);
// Returns sum(x^2) accumulated in double, in element order.
double sum_squares(const Tensor& x);
// Returns false when any element is NaN or infinite.
bool all_finite(const Tensor& x);

}  // namespace anvil::cpu_ref
