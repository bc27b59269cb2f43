// MLP half of a Llama layer: rmsnorm, SwiGLU (gate, up, silu(gate) * up), down projection and
// the residual add.
#include "model/mlp_block.h"

#include "model/linear.h"

namespace anvil {

void mlp_block_forward(const BlockContext& ctx, const LayerWeights& w, LayerActivations& a,
                       const Tensor& out) {
  Backend& backend = *ctx.backend;
  backend.rmsnorm_forward(a.resid_mid, w.mlp_norm, a.mlp_norm_out, a.mlp_rstd,
                          ctx.config->norm_eps);
  linear_forward(backend, a.mlp_norm_out, w.w_gate, a.gate);
  linear_forward(backend, a.mlp_norm_out, w.w_up, a.up);
  backend.swiglu_forward(a.gate, a.up, a.swiglu_out);
  linear_forward(backend, a.swiglu_out, w.w_down, out);
  backend.add(out, a.resid_mid, out);
}

void mlp_block_backward(const BlockContext& ctx, const LayerWeights& w, const LayerWeights& g,
                        const LayerActivations& a, const BackwardScratch& s) {
  Backend& backend = *ctx.backend;
  // down_proj: d_swiglu (N,F) =, dWdown +=.
  const Tensor d_out = as_compute_operand(backend, s.d_residual, s.d_residual_compute);
  linear_backward_input(backend, d_out, w.w_down, s.d_swiglu, false);
  linear_backward_weight(backend, d_out, a.swiglu_out, g.w_down);
  // swiglu: d_gate, d_up (N,F) =.
  backend.swiglu_backward(s.d_swiglu, a.gate, a.up, s.d_gate, s.d_up);
  // gate/up: d_norm_out (N,C) = d_gate Wgate + d_up Wup; dWgate, dWup +=.
  linear_backward_input(backend, s.d_gate, w.w_gate, s.d_norm_out, false);
  linear_backward_input(backend, s.d_up, w.w_up, s.d_norm_out, true);
  linear_backward_weight(backend, s.d_gate, a.mlp_norm_out, g.w_gate);
  linear_backward_weight(backend, s.d_up, a.mlp_norm_out, g.w_up);
  // rmsnorm: d_residual += dL/dh through the norm (it already holds the residual path).
  backend.rmsnorm_backward(s.d_norm_out, a.resid_mid, w.mlp_norm, a.mlp_rstd, s.d_residual,
                           g.mlp_norm);
}

}  // namespace anvil
