// The ends of the network: the token embedding at the bottom and, at the top, the final
// rmsnorm, the lm head (lm_head.weight, or the embedding table when tied) and the fused
// softmax cross-entropy. The head runs over row chunks of at most logits_chunk_rows so the
// (N, V) logits never exist at once: per chunk, f32 logits -> loss and dlogits (in place for
// an f32 model, into the compute-dtype chunk otherwise) -> input and weight gradients.
// Parameter gradients are accumulated (+=).
#pragma once

#include "model/activations.h"
#include "model/block_context.h"
#include "model/llama_parameters.h"

namespace anvil {

// out (N, C) = table (V, C)[tokens (N)].
void embedding_block_forward(const BlockContext& ctx, const Tensor& table, const Tensor& tokens,
                             const Tensor& out);
// dtable (V, C) += scatter of d_out (N, C) by tokens.
void embedding_block_backward(const BlockContext& ctx, const Tensor& tokens, const Tensor& d_out,
                              const Tensor& dtable);

// Inputs of the loss: targets (N) i32, optional loss_mask (N) f32 (undefined when absent).
struct LossTargets {
  Tensor targets;
  Tensor loss_mask;
};

// Forward and backward of the head for x (N, C) = last layer output: losses (N) = per-row
// loss; g.final_norm and g.lm_head +=; s.d_residual (N, C) = dL/dx for the layers below,
// where L = grad_scale * sum of losses. Uses logits (rows, V) as the chunk buffer.
void head_block_forward_backward(const BlockContext& ctx, const LlamaWeights& w,
                                 const LlamaWeights& g, const Tensor& x, ModelActivations& acts,
                                 const LossTargets& loss, float grad_scale);
// Forward only: losses (N) = per-row loss of x (N, C) against the targets.
void head_block_forward_loss(const BlockContext& ctx, const LlamaWeights& w, const Tensor& x,
                             ModelActivations& acts, const LossTargets& loss);
// Forward only: logits (N, V) = lm_head(rmsnorm(x)) written to a caller's tensor.
void head_block_forward_logits(const BlockContext& ctx, const LlamaWeights& w, const Tensor& x,
                               ModelActivations& acts, const Tensor& logits);

}  // namespace anvil
