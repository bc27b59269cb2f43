// Embedding lookup and the chunked final-norm + lm-head + cross-entropy head.
#include "model/head_block.h"

#include <algorithm>

#include "core/error.h"
#include "model/batch.h"
#include "model/linear.h"
#include "model/vocab_parallel.h"

namespace anvil {

void embedding_block_forward(const BlockContext& ctx, const Tensor& table, const Tensor& tokens,
                             const Tensor& out) {
  if (!ctx.tp.enabled()) {
    ctx.backend->embedding_forward(tokens, table, out);
    return;
  }
  // Each position's row lives on one tp rank; the others contribute zeros.
  const Tensor partial = ctx.row_parallel_output(out);
  ctx.backend->embedding_shard_forward(tokens, table, partial, ctx.vocab_begin);
  ctx.reduce_rows(partial, out);
}

void embedding_block_backward(const BlockContext& ctx, const Tensor& tokens, const Tensor& d_out,
                              const Tensor& dtable) {
  if (!ctx.tp.enabled()) {
    ctx.backend->embedding_backward(tokens, d_out, dtable);
    return;
  }
  ctx.backend->embedding_shard_backward(tokens, ctx.gather_rows(d_out, ctx.sp_full), dtable,
                                       ctx.vocab_begin);
}

namespace {

// Runs the final norm of x (this rank's rows, C) into acts.final_norm_out / acts.final_rstd
// and returns all N rows of its output (gathered under sequence parallelism).
Tensor final_norm_forward(const BlockContext& ctx, const LlamaWeights& w, const Tensor& x,
                          ModelActivations& acts) {
  const int64_t n = ctx.local_rows;
  const Tensor normed = leading_rows(acts.final_norm_out, n, ctx.config->dim);
  ctx.backend->rmsnorm_forward(x, w.final_norm, normed, acts.final_rstd.flat(0, n),
                               ctx.config->norm_eps);
  return ctx.gather_rows(normed, ctx.sp_gathered);
}

// Runs the cross-entropy of chunk rows [begin, end) (logits already in `logits`).
void chunk_loss(const BlockContext& ctx, const Tensor& logits, const LossTargets& loss,
                ModelActivations& acts, int64_t begin, int64_t end, const Tensor* dlogits,
                float grad_scale) {
  const Tensor targets = loss.targets.slice(begin, end);
  const Tensor mask = loss.loss_mask.defined() ? loss.loss_mask.slice(begin, end) : Tensor();
  if (ctx.tp.enabled()) {
    vocab_parallel_cross_entropy(ctx, logits, targets, mask, acts.losses.slice(begin, end),
                                 dlogits, grad_scale);
    return;
  }
  ctx.backend->cross_entropy(logits, targets, mask.defined() ? &mask : nullptr, kIgnoreIndex,
                             acts.losses.slice(begin, end), dlogits, grad_scale);
}

int64_t chunk_rows(const ModelActivations& acts, const LlamaConfig& config) {
  return acts.logits.numel() / config.vocab_size;
}

}  // namespace

void head_block_forward_backward(const BlockContext& ctx, const LlamaWeights& w,
                                 const LlamaWeights& g, const Tensor& x, ModelActivations& acts,
                                 const LossTargets& loss, float grad_scale) {
  Backend& backend = *ctx.backend;
  const int64_t n = ctx.dims.rows(), c = ctx.config->dim, v = ctx.config->vocab_size;
  const Tensor normed = final_norm_forward(ctx, w, x, acts);
  const Tensor d_normed = leading_rows(acts.scratch.d_norm_out, n, c);
  const int64_t step = chunk_rows(acts, *ctx.config);
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t end = std::min(n, begin + step);
    const Tensor logits = leading_rows(acts.logits, end - begin, v);
    const Tensor rows = normed.slice(begin, end);
    linear_forward(backend, rows, w.lm_head, logits);
    // The fused classifier: loss and dlogits in one pass, dlogits over the logits in place.
    chunk_loss(ctx, logits, loss, acts, begin, end, &logits, grad_scale);
    // d_normed rows =, dW_head += (one GEMM per chunk).
    linear_backward_input(backend, logits, w.lm_head, d_normed.slice(begin, end), false);
    if (g.lm_head.defined()) linear_backward_weight(backend, logits, rows, g.lm_head);
  }
  // Each tp rank's head columns give a partial input gradient (column-parallel head).
  const Tensor d_mine = ctx.reduce_rows(d_normed, ctx.sp_d_norm);
  const int64_t rows = ctx.local_rows;
  const Tensor d_residual = leading_rows(acts.scratch.d_residual, rows, c);
  backend.fill_zero(d_residual);
  rmsnorm_backward_rows(ctx, d_mine, x, w.final_norm, acts.final_rstd.flat(0, rows), d_residual,
                        g.final_norm,
                        residual_copy_target(ctx, d_residual, acts.scratch.d_residual_compute));
}

void head_block_forward_loss(const BlockContext& ctx, const LlamaWeights& w, const Tensor& x,
                             ModelActivations& acts, const LossTargets& loss) {
  const int64_t n = ctx.dims.rows(), v = ctx.config->vocab_size;
  const Tensor normed = final_norm_forward(ctx, w, x, acts);
  const int64_t step = chunk_rows(acts, *ctx.config);
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t end = std::min(n, begin + step);
    const Tensor logits = leading_rows(acts.logits, end - begin, v);
    linear_forward(*ctx.backend, normed.slice(begin, end), w.lm_head, logits);
    chunk_loss(ctx, logits, loss, acts, begin, end, nullptr, 1.0f);
  }
}

void head_block_forward_logits(const BlockContext& ctx, const LlamaWeights& w, const Tensor& x,
                               ModelActivations& acts, const Tensor& logits) {
  ANVIL_CHECK(!ctx.tp.enabled(), "[model] full logits are not computed under tensor parallelism");
  const Tensor normed = final_norm_forward(ctx, w, x, acts);
  linear_forward(*ctx.backend, normed, w.lm_head, logits);
}

}  // namespace anvil
