// The attention half of a Llama layer, as explicit forward and backward functions:
//   resid_mid = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))
//   with n = rmsnorm(x) * input_layernorm.weight.
// Shapes: x, resid_mid (N, C) with N = B*T rows; q/attn_out (B, T, Hq, D); k, v (B, T, Hkv, D).
// Gradient convention: parameter gradients are always accumulated (+=); activation gradients
// say = or += per argument.
#pragma once

#include "model/activations.h"
#include "model/block_context.h"
#include "model/llama_parameters.h"
#include "model/lora.h"

namespace anvil {

// `lora` (nullptr: none) adds the layer's adapters to q/k/v/o_proj; a frozen base (undefined
// gradient views) gets no weight gradients.

// Computes a.attn_norm_out, a.attn_rstd and a.q, a.k, a.v (rope applied to q and k) from
// x (N, C). Shared by training and by KV-cache decoding.
void attention_qkv_forward(const BlockContext& ctx, const LayerWeights& w, const Tensor& x,
                           LayerActivations& a, const LoraLayerStep* lora = nullptr);
// Computes a.resid_mid (N, C) = x + a.attn_out @ Wo^T and, fused into the same pass, the MLP
// half's input norm of it: a.mlp_norm_out and a.mlp_rstd (w.mlp_norm is this layer's).
void attention_output_forward(const BlockContext& ctx, const LayerWeights& w, const Tensor& x,
                              LayerActivations& a, const LoraLayerStep* lora = nullptr);
// Runs the whole attention half of layer `layer`: qkv, attention with the layer's mask
// (ctx.attention(layer)) into a.attn_out/a.attn_lse, output.
void attention_block_forward(const BlockContext& ctx, int layer, const LayerWeights& w,
                             const Tensor& x, LayerActivations& a,
                             const LoraLayerStep* lora = nullptr);
// Backward of attention_block_forward. On entry s.d_residual (N, C) holds dL/d resid_mid (and
// s.d_residual_compute its compute-dtype copy); on exit both hold dL/dx (the residual path
// plus the norm path, +=). Parameter grads g +=.
// Uses s.d_attn_out, s.dq, s.dk, s.dv and s.d_norm_out as scratch (=).
void attention_block_backward(const BlockContext& ctx, int layer, const LayerWeights& w,
                              const LayerWeights& g, const Tensor& x, const LayerActivations& a,
                              const BackwardScratch& s, const LoraLayerStep* lora = nullptr);

}  // namespace anvil
