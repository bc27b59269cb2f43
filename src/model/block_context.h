// BlockContext: what every block function of one step shares: the backend, the config, the
// step's (B, T), positions, the attention mask settings and the ones vector used for biases.
// It is rebuilt per step from arena views and never owns memory. Under context parallelism
// `cp` holds the ring exchange and the rows are the rank's chunks of each sequence. Under
// tensor parallelism `config` holds the shard's shapes (tp_shard_config) and `tp` the
// collectives the blocks call where a split matmul's partial results meet.
#pragma once

#include "backend/backend.h"
#include "model/activations.h"
#include "model/attention_schedule.h"
#include "model/context_parallel.h"
#include "model/llama_config.h"
#include "model/tensor_parallel.h"

namespace anvil {

struct VocabParallelScratch;  // model/vocab_parallel.h

struct BlockContext {
  Backend* backend = nullptr;
  const LlamaConfig* config = nullptr;
  StepDims dims;
  Tensor positions;  // (B, T) i32 absolute positions of the rows
  // (B, T) i32, or undefined for plain causal attention; under context parallelism (B, T x cp):
  // the whole sequences' ids, indexed by absolute position.
  Tensor doc_ids;
  AttentionSchedule attention_schedule;  // each layer's window, sparse pattern and sinks
  Tensor ones;       // (N, 1) f32 ones when the config has attention bias
  RopeParams rope;
  // (C) f32 sink for the weight gradient of a frozen norm (LoRA): rmsnorm_backward always
  // writes one, and a frozen base has no gradient buffer to receive it. Undefined otherwise.
  Tensor norm_grad_sink;
  TensorParallel tp;
  // Context parallelism: the rows are this cp rank's chunks of each sequence (positions holds
  // their global positions) and attention runs as a ring (model/context_parallel.h).
  ContextParallel cp;
  ContextParallelScratch* cp_scratch = nullptr;  // the ring's buffers when cp > 1
  int64_t vocab_begin = 0;  // first vocabulary row of this tp rank's embedding and head shards
  VocabParallelScratch* vocab_parallel = nullptr;  // the head's buffers under tp; else nullptr
  // Rows of the residual stream this rank holds: dims.rows(), or under sequence parallelism
  // dims.rows() / tp starting at row `row_begin` of the batch.
  int64_t local_rows = 0;
  int64_t row_begin = 0;
  // Sequence parallelism: (N, C) compute and f32 gather buffers, (N / tp, C) f32 for a reduced
  // norm gradient (ModelActivations::sp_*); undefined otherwise.
  Tensor sp_gathered;
  Tensor sp_full;
  Tensor sp_d_norm;
  Tensor sp_norm_grad;  // (C) f32: one norm weight's gradient over this rank's rows

  // Sums `t` over the tp ranks in place (a no-op without tensor parallelism).
  void tp_all_reduce(const Tensor& t) const {
    if (tp.enabled()) tp.ops->all_reduce(t);
  }
  // Returns all N rows of `local` (this rank's rows under sequence parallelism, gathered into
  // `full`, which must hold N rows of local's dtype); otherwise `local` itself.
  Tensor gather_rows(const Tensor& local, const Tensor& full) const {
    if (!tp.splits_sequence()) return local;
    const int64_t width = local.shape[1];
    const Tensor all = full.flat(0, dims.rows() * width).view(Shape{dims.rows(), width});
    tp.ops->all_gather(local, all);
    return all;
  }
  // Sums the tp ranks' partial N rows `partial` (a row-parallel matmul's output, or the input
  // gradient of a column-parallel one) and returns this rank's rows of the sum: under
  // sequence parallelism reduce-scattered into `local` (N / tp rows), else all-reduced in
  // place (and `partial` returned).
  Tensor reduce_rows(const Tensor& partial, const Tensor& local) const {
    if (!tp.splits_sequence()) {
      tp_all_reduce(partial);
      return partial;
    }
    const int64_t width = partial.shape[1];
    const Tensor mine = local.flat(0, local_rows * width).view(Shape{local_rows, width});
    tp.ops->reduce_scatter(partial, mine);
    return mine;
  }
  // Returns the (N, C) f32 buffer a row-parallel matmul writes into: `local_out` itself
  // without sequence parallelism, else the full-rows buffer that reduce_rows scatters from.
  Tensor row_parallel_output(const Tensor& local_out) const {
    if (!tp.splits_sequence()) return local_out;
    const int64_t width = local_out.shape[1];
    return sp_full.flat(0, dims.rows() * width).view(Shape{dims.rows(), width});
  }

  // Returns g when the weight is trained, otherwise the sink (frozen norm weights).
  const Tensor& norm_grad(const Tensor& g) const { return g.defined() ? g : norm_grad_sink; }

  // Returns layer `layer`'s attention op settings in this step: causal, the schedule's mask,
  // the document mask when doc_ids is defined.
  AttentionParams attention(int layer) const {
    AttentionParams params;
    params.causal = true;
    params.doc_ids = doc_ids.defined() ? &doc_ids : nullptr;
    attention_schedule.apply(layer, params);
    return params;
  }
};

// rmsnorm backward on this rank's rows: dx +=, dweight += (the sink for a frozen norm); when
// `dx_copy` is defined it receives the updated dx in its dtype in the same pass. Under
// sequence parallelism a rank's rows give only part of a norm weight's gradient; the parts
// are summed over tp (so the replicated weight stays identical on every tp rank).
inline void rmsnorm_backward_rows(const BlockContext& ctx, const Tensor& dout, const Tensor& x,
                                  const Tensor& weight, const Tensor& rstd, const Tensor& dx,
                                  const Tensor& dweight, const Tensor& dx_copy = Tensor()) {
  Backend& backend = *ctx.backend;
  const Tensor* copy = dx_copy.defined() ? &dx_copy : nullptr;
  if (!ctx.tp.splits_sequence() || !dweight.defined()) {
    backend.rmsnorm_backward(dout, x, weight, rstd, dx, ctx.norm_grad(dweight), copy);
    return;
  }
  backend.fill_zero(ctx.sp_norm_grad);
  backend.rmsnorm_backward(dout, x, weight, rstd, dx, ctx.sp_norm_grad, copy);
  ctx.tp.ops->all_reduce(ctx.sp_norm_grad);
  backend.add(dweight, ctx.sp_norm_grad, dweight);
}

// The residual gradient d_residual flows down the layers in f32; the projections that wrote
// the residual stream take it as a GEMM operand in the compute dtype. Every norm backward
// that updates d_residual writes that operand in the same pass (the residual backward's cast
// fused into the norm), so the next block reads it as it is.
// Returns where a norm backward writing `d_residual` (rows, C) also writes the operand:
// `d_residual_compute`'s leading rows, or undefined when the operand is d_residual itself
// (an f32 model) or is gathered from every tp rank first (sequence parallelism).
inline Tensor residual_copy_target(const BlockContext& ctx, const Tensor& d_residual,
                                   const Tensor& d_residual_compute) {
  if (ctx.tp.splits_sequence() || d_residual_compute.data == d_residual.data) return Tensor();
  return d_residual_compute.flat(0, d_residual.numel()).view(d_residual.shape);
}
// Returns the residual gradient of all N rows as that GEMM operand: under sequence
// parallelism gathered from every tp rank and cast to the compute dtype; otherwise the copy
// the last norm backward wrote (d_residual itself for an f32 model).
inline Tensor residual_gradient_operand(const BlockContext& ctx, const BackwardScratch& s) {
  if (!ctx.tp.splits_sequence()) return s.d_residual_compute;
  const Tensor all = ctx.gather_rows(s.d_residual, ctx.sp_full);
  if (s.d_residual_compute.data == all.data) return all;
  ctx.backend->cast(all, s.d_residual_compute);
  return s.d_residual_compute;
}

}  // namespace anvil
