// The MLP half of a Llama layer, as explicit forward and backward functions:
//   out = h + down_proj(silu(gate_proj(n)) * up_proj(n)), n = rmsnorm(h) *
//   post_attention_layernorm.
// Shapes: h, out (N, C); gate, up, swiglu_out (N, F). Parameter gradients are accumulated (+=).
#pragma once

#include "model/activations.h"
#include "model/block_context.h"
#include "model/llama_parameters.h"
#include "model/lora.h"

namespace anvil {

// Computes out (N, C) from h = a.resid_mid and its norm a.mlp_norm_out (written, with
// a.mlp_rstd, by attention_output_forward's fused residual add), saving a.gate, a.up and
// a.swiglu_out. `out` must not alias h.
// `lora` (nullptr: none) adds the layer's gate/up/down_proj adapters.
void mlp_block_forward(const BlockContext& ctx, const LayerWeights& w, LayerActivations& a,
                       const Tensor& out, const LoraLayerStep* lora = nullptr);
// Backward of mlp_block_forward. On entry s.d_residual (N, C) holds dL/d out (and
// s.d_residual_compute its compute-dtype copy); on exit both hold dL/d h (+= through the norm). Parameter grads g +=. Uses s.d_swiglu, s.d_gate, s.d_up and
// s.d_norm_out as scratch (=). A frozen base (undefined g views) gets no weight gradients.
void mlp_block_backward(const BlockContext& ctx, const LayerWeights& w, const LayerWeights& g,
                        const LayerActivations& a, const BackwardScratch& s,
                        const LoraLayerStep* lora = nullptr);

}  // namespace anvil
