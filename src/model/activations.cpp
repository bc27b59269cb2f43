// Carving and per-step sizing of the model's activation buffers.
#include "model/activations.h"

namespace anvil {

Tensor leading_rows(const Tensor& flat, int64_t rows, int64_t cols) {
  return flat.flat(0, rows * cols).view(Shape{rows, cols});
}

namespace {

Tensor per_head(const Tensor& flat, StepDims dims, int heads, int head_dim) {
  return flat.flat(0, dims.rows() * heads * head_dim)
      .view(Shape{dims.batch, dims.seq, heads, head_dim});
}

}  // namespace

LayerActivations LayerActivations::sized(const LlamaConfig& config, StepDims dims,
                                         int64_t local_rows) const {
  const int64_t n = dims.rows(), c = config.dim, f = config.ffn_dim;
  const int64_t nl = local_rows > 0 ? local_rows : n;
  const int d = config.resolved_head_dim();
  LayerActivations s;
  s.attn_norm_out = leading_rows(attn_norm_out, nl, c);
  s.attn_rstd = attn_rstd.flat(0, nl);
  s.q = per_head(q, dims, config.n_heads, d);
  s.k = per_head(k, dims, config.n_kv_heads, d);
  s.v = per_head(v, dims, config.n_kv_heads, d);
  s.attn_out = per_head(attn_out, dims, config.n_heads, d);
  s.attn_lse =
      attn_lse.flat(0, n * config.n_heads).view(Shape{dims.batch, config.n_heads, dims.seq});
  s.resid_mid = leading_rows(resid_mid, nl, c);
  s.mlp_norm_out = leading_rows(mlp_norm_out, nl, c);
  s.mlp_rstd = mlp_rstd.flat(0, nl);
  s.gate = leading_rows(gate, n, f);
  s.up = leading_rows(up, n, f);
  s.swiglu_out = leading_rows(swiglu_out, n, f);
  return s;
}

BackwardScratch BackwardScratch::sized(const LlamaConfig& config, StepDims dims,
                                       int64_t local_rows) const {
  const int64_t n = dims.rows(), c = config.dim, f = config.ffn_dim;
  const int d = config.resolved_head_dim();
  BackwardScratch s;
  s.d_residual = leading_rows(d_residual, local_rows > 0 ? local_rows : n, c);
  s.d_residual_compute = leading_rows(d_residual_compute, n, c);
  s.d_norm_out = leading_rows(d_norm_out, n, c);
  s.d_attn_out = per_head(d_attn_out, dims, config.n_heads, d);
  s.dq = per_head(dq, dims, config.n_heads, d);
  s.dk = per_head(dk, dims, config.n_kv_heads, d);
  s.dv = per_head(dv, dims, config.n_kv_heads, d);
  s.d_swiglu = leading_rows(d_swiglu, n, f);
  s.d_gate = leading_rows(d_gate, n, f);
  s.d_up = leading_rows(d_up, n, f);
  return s;
}

void ModelActivations::carve(Arena& arena, const LlamaConfig& config, int max_batch,
                             int64_t max_rows, int layer_sets, int64_t logits_chunk_rows,
                             DType compute, int sequence_split) {
  const int64_t n = max_rows, c = config.dim, f = config.ffn_dim;
  const int64_t nl = max_rows / sequence_split;  // rows of this rank's part of the sequence
  const int64_t q_dim = config.q_dim(), kv_dim = config.kv_dim();
  auto f32 = [&](int64_t numel) { return arena.take(DType::f32, Shape{numel}); };
  auto act = [&](int64_t numel) { return arena.take(compute, Shape{numel}); };
  auto i32 = [&](int64_t numel) { return arena.take(DType::i32, Shape{numel}); };

  residual.clear();
  for (int l = 0; l <= config.n_layers; ++l) residual.push_back(f32(nl * c));
  layers.assign(layer_sets, LayerActivations{});
  for (LayerActivations& a : layers) {
    a.attn_norm_out = act(nl * c);
    a.attn_rstd = f32(nl);
    a.q = act(n * q_dim);
    a.k = act(n * kv_dim);
    a.v = act(n * kv_dim);
    a.attn_out = act(n * q_dim);
    a.attn_lse = f32(n * config.n_heads);
    a.resid_mid = f32(nl * c);
    a.mlp_norm_out = act(nl * c);
    a.mlp_rstd = f32(nl);
    a.gate = act(n * f);
    a.up = act(n * f);
    a.swiglu_out = act(n * f);
  }
  const bool f32_model = compute == DType::f32;
  const bool split = sequence_split > 1;
  scratch.d_residual = f32(nl * c);
  sp_full = split ? f32(n * c) : Tensor();
  sp_gathered = split ? act(n * c) : Tensor();
  sp_d_norm = split ? f32(nl * c) : Tensor();
  sp_norm_grad = split ? f32(c) : Tensor();
  // The projections' GEMM operand: d_residual itself (f32, whole sequence), or a compute
  // copy; under sequence parallelism the gathered f32 gradient lives in sp_full.
  const Tensor& d_residual_f32 = split ? sp_full : scratch.d_residual;
  scratch.d_residual_compute = f32_model ? d_residual_f32 : act(n * c);
  scratch.d_norm_out = f32(n * c);
  // The head runs before any layer's backward and leaves nothing in its logits chunk, so the
  // chunk shares its bytes with the layers' backward scratch (which the head never touches:
  // it uses d_norm_out and d_residual, carved above).
  arena.overlay(
      [&](Arena&) {
        scratch.d_attn_out = act(n * q_dim);
        scratch.dq = act(n * q_dim);
        scratch.dk = act(n * kv_dim);
        scratch.dv = act(n * kv_dim);
        scratch.d_swiglu = act(n * f);
        scratch.d_gate = act(n * f);
        scratch.d_up = act(n * f);
      },
      [&](Arena&) { logits = act(logits_chunk_rows * config.vocab_size); });
  final_norm_out = act(nl * c);
  final_rstd = f32(nl);
  losses = f32(n);
  loss_sum = arena.take(DType::u32, Shape{2});
  tokens = i32(n);
  targets = i32(n);
  loss_mask = f32(n);
  doc_ids = i32(n);
  positions = i32(n);
  ones = act(config.attention_bias ? n : 1);
}

}  // namespace anvil
