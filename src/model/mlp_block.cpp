// MLP half of a Llama layer: SwiGLU (gate, up, silu(gate) * up) of the rmsnorm output the
// attention half's fused residual add left in a.mlp_norm_out, down projection (each optionally
// with a LoRA adapter) and the residual add. In backward the norm also writes the residual
// gradient's compute-dtype copy for the attention half (block_context.h).
#include "model/mlp_block.h"

#include "model/linear.h"

namespace anvil {

namespace {

// dW += dy^T x unless the weight is frozen (no gradient view).
void weight_grad(Backend& backend, const Tensor& dy, const Tensor& x, const Tensor& dweight) {
  if (dweight.defined()) linear_backward_weight(backend, dy, x, dweight);
}

}  // namespace

void mlp_block_forward(const BlockContext& ctx, const LayerWeights& w, LayerActivations& a,
                       const Tensor& out, const LoraLayerStep* lora) {
  Backend& backend = *ctx.backend;
  // Sequence parallelism: the norm ran on this rank's rows; gate and up take all of them.
  const Tensor normed = ctx.gather_rows(a.mlp_norm_out, ctx.sp_gathered);
  linear_forward(backend, normed, w.w_gate, a.gate);
  linear_forward(backend, normed, w.w_up, a.up);
  if (lora) {
    lora_forward(*lora, LoraTarget::gate_proj, normed, a.gate);
    lora_forward(*lora, LoraTarget::up_proj, normed, a.up);
  }
  backend.swiglu_forward(a.gate, a.up, a.swiglu_out);
  // Row-parallel down_proj: sum the FFN columns' partial outputs.
  const Tensor partial = ctx.row_parallel_output(out);
  linear_forward(backend, a.swiglu_out, w.w_down, partial);
  ctx.reduce_rows(partial, out);
  if (lora) lora_forward(*lora, LoraTarget::down_proj, a.swiglu_out, out);
  backend.add(out, a.resid_mid, out);
}

void mlp_block_backward(const BlockContext& ctx, const LayerWeights& w, const LayerWeights& g,
                        const LayerActivations& a, const BackwardScratch& s,
                        const LoraLayerStep* lora) {
  Backend& backend = *ctx.backend;
  // down_proj: d_swiglu (N,F) = (+ adapter path), dWdown +=.
  const Tensor d_out = residual_gradient_operand(ctx, s);
  linear_backward_input(backend, d_out, w.w_down, s.d_swiglu, false);
  weight_grad(backend, d_out, a.swiglu_out, g.w_down);
  if (lora) lora_backward(*lora, LoraTarget::down_proj, a.swiglu_out, d_out, s.d_swiglu);
  // swiglu: d_gate, d_up (N,F) =.
  backend.swiglu_backward(s.d_swiglu, a.gate, a.up, s.d_gate, s.d_up);
  // gate/up: d_norm_out (N,C) = d_gate Wgate + d_up Wup (+ adapters); dWgate, dWup +=.
  const Tensor normed = ctx.gather_rows(a.mlp_norm_out, ctx.sp_gathered);
  linear_backward_input(backend, s.d_gate, w.w_gate, s.d_norm_out, false);
  linear_backward_input(backend, s.d_up, w.w_up, s.d_norm_out, true);
  weight_grad(backend, s.d_gate, normed, g.w_gate);
  weight_grad(backend, s.d_up, normed, g.w_up);
  if (lora) {
    lora_backward(*lora, LoraTarget::gate_proj, normed, s.d_gate, s.d_norm_out);
    lora_backward(*lora, LoraTarget::up_proj, normed, s.d_up, s.d_norm_out);
  }
  // Column-parallel gate/up: each tp rank's FFN columns give a partial input gradient.
  const Tensor d_normed = ctx.reduce_rows(s.d_norm_out, ctx.sp_d_norm);
  // rmsnorm: d_residual += dL/dh through the norm (it already holds the residual path).
  rmsnorm_backward_rows(ctx, d_normed, a.resid_mid, w.mlp_norm, a.mlp_rstd, s.d_residual,
                        g.mlp_norm, residual_copy_target(ctx, s.d_residual, s.d_residual_compute));
}

}  // namespace anvil
