// Attention half of a Llama layer: rmsnorm, q/k/v projections (+ Qwen2 bias, + LoRA),
// rotate-half RoPE, GQA causal attention (the layer's window/sparse mask, optional document
// mask; a ring over the cp ranks under context parallelism), o projection and the residual
// add, fused with the MLP half's rmsnorm that reads its result (one pass over the rows).
// Adapters add to a projection's output before rope and the residual add, as PEFT's
// lora.Linear wraps the whole base projection. In backward the input norm also writes the
// residual gradient's compute-dtype copy for the layer below (block_context.h).
#include "model/attention_block.h"

#include "backend/device_trace.h"
#include "model/context_parallel.h"
#include "model/linear.h"

namespace anvil {

namespace {

// dW += dy^T x unless the weight is frozen (no gradient view).
void weight_grad(Backend& backend, const Tensor& dy, const Tensor& x, const Tensor& dweight) {
  if (dweight.defined()) linear_backward_weight(backend, dy, x, dweight);
}

}  // namespace

void attention_qkv_forward(const BlockContext& ctx, const LayerWeights& w, const Tensor& x,
                           LayerActivations& a, const LoraLayerStep* lora) {
  Backend& backend = *ctx.backend;
  backend.rmsnorm_forward(x, w.attn_norm, a.attn_norm_out, a.attn_rstd, ctx.config->norm_eps);
  // Sequence parallelism: the norm ran on this rank's rows; the projections take all of them.
  const Tensor normed = ctx.gather_rows(a.attn_norm_out, ctx.sp_gathered);
  linear_forward(backend, normed, w.wq, a.q);
  linear_forward(backend, normed, w.wk, a.k);
  linear_forward(backend, normed, w.wv, a.v);
  if (ctx.config->attention_bias) {
    bias_add_forward(backend, ctx.ones, w.bq, a.q);
    bias_add_forward(backend, ctx.ones, w.bk, a.k);
    bias_add_forward(backend, ctx.ones, w.bv, a.v);
  }
  if (lora) {
    lora_forward(*lora, LoraTarget::q_proj, normed, a.q);
    lora_forward(*lora, LoraTarget::k_proj, normed, a.k);
    lora_forward(*lora, LoraTarget::v_proj, normed, a.v);
  }
  backend.rope_forward(a.q, a.q, ctx.positions, ctx.rope);
  backend.rope_forward(a.k, a.k, ctx.positions, ctx.rope);
}

void attention_output_forward(const BlockContext& ctx, const LayerWeights& w, const Tensor& x,
                              LayerActivations& a, const LoraLayerStep* lora) {
  Backend& backend = *ctx.backend;
  // Row-parallel o_proj: sum the heads' partial outputs (into this rank's rows under
  // sequence parallelism).
  const Tensor out = ctx.row_parallel_output(a.resid_mid);
  linear_forward(backend, a.attn_out, w.wo, out);
  ctx.reduce_rows(out, a.resid_mid);
  if (lora) lora_forward(*lora, LoraTarget::o_proj, a.attn_out, a.resid_mid);
  // resid_mid = x + o_proj(...), and the MLP's input norm of it in the same pass.
  backend.add_rmsnorm_forward(a.resid_mid, x, a.resid_mid, w.mlp_norm, a.mlp_norm_out,
                              a.mlp_rstd, ctx.config->norm_eps);
}

void attention_block_forward(const BlockContext& ctx, int layer, const LayerWeights& w,
                             const Tensor& x, LayerActivations& a, const LoraLayerStep* lora) {
  attention_qkv_forward(ctx, w, x, a, lora);
  DeviceSpan device(*ctx.backend, "attention forward");
  if (ctx.cp.enabled()) {
    cp_attention_forward(*ctx.backend, ctx.cp, *ctx.cp_scratch, a.q, a.k, a.v, a.attn_out,
                         a.attn_lse, ctx.attention(layer));
  } else {
    ctx.backend->attention_forward(a.q, a.k, a.v, a.attn_out, a.attn_lse, ctx.attention(layer));
  }
  device.end();
  attention_output_forward(ctx, w, x, a, lora);
}

void attention_block_backward(const BlockContext& ctx, int layer, const LayerWeights& w,
                              const LayerWeights& g, const Tensor& x, const LayerActivations& a,
                              const BackwardScratch& s, const LoraLayerStep* lora) {
  Backend& backend = *ctx.backend;
  // o_proj: d_attn_out (B,T,Hq,D) =, dWo +=; the adapter adds its path to d_attn_out.
  const Tensor d_resid_mid = residual_gradient_operand(ctx, s);
  linear_backward_input(backend, d_resid_mid, w.wo, s.d_attn_out, false);
  weight_grad(backend, d_resid_mid, a.attn_out, g.wo);
  if (lora) lora_backward(*lora, LoraTarget::o_proj, a.attn_out, d_resid_mid, s.d_attn_out);
  // attention: dq, dk, dv =; then undo the rotation in place.
  DeviceSpan device(backend, "attention backward");
  if (ctx.cp.enabled()) {
    cp_attention_backward(backend, ctx.cp, *ctx.cp_scratch, s.d_attn_out, a.q, a.k, a.v,
                          a.attn_out, a.attn_lse, s.dq, s.dk, s.dv, ctx.attention(layer));
  } else {
    backend.attention_backward(s.d_attn_out, a.q, a.k, a.v, a.attn_out, a.attn_lse, s.dq, s.dk,
                               s.dv, ctx.attention(layer));
  }
  device.end();
  backend.rope_backward(s.dq, s.dq, ctx.positions, ctx.rope);
  backend.rope_backward(s.dk, s.dk, ctx.positions, ctx.rope);
  if (ctx.config->attention_bias && g.bq.defined()) {
    bias_backward(backend, ctx.ones, s.dq, g.bq);
    bias_backward(backend, ctx.ones, s.dk, g.bk);
    bias_backward(backend, ctx.ones, s.dv, g.bv);
  }
  // projections: d_norm_out (N,C) = dq Wq + dk Wk + dv Wv (+ adapters); dWq, dWk, dWv +=.
  const Tensor normed = ctx.gather_rows(a.attn_norm_out, ctx.sp_gathered);
  linear_backward_input(backend, s.dq, w.wq, s.d_norm_out, false);
  linear_backward_input(backend, s.dk, w.wk, s.d_norm_out, true);
  linear_backward_input(backend, s.dv, w.wv, s.d_norm_out, true);
  weight_grad(backend, s.dq, normed, g.wq);
  weight_grad(backend, s.dk, normed, g.wk);
  weight_grad(backend, s.dv, normed, g.wv);
  if (lora) {
    lora_backward(*lora, LoraTarget::q_proj, normed, s.dq, s.d_norm_out);
    lora_backward(*lora, LoraTarget::k_proj, normed, s.dk, s.d_norm_out);
    lora_backward(*lora, LoraTarget::v_proj, normed, s.dv, s.d_norm_out);
  }
  // Column-parallel q/k/v: each tp rank's heads give a partial input gradient.
  const Tensor d_normed = ctx.reduce_rows(s.d_norm_out, ctx.sp_d_norm);
  // rmsnorm: d_residual += dL/dx through the norm (it already holds the residual path).
  rmsnorm_backward_rows(ctx, d_normed, x, w.attn_norm, a.attn_rstd, s.d_residual, g.attn_norm,
                        residual_copy_target(ctx, s.d_residual, s.d_residual_compute));
}

}  // namespace anvil
