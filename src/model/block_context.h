// BlockContext: what every block function of one step shares: the backend, the config, the
// step's (B, T), positions, the attention mask settings and the ones vector used for biases.
// It is rebuilt per step from arena views and never owns memory. Under tensor parallelism
// `config` holds the shard's shapes (tp_shard_config) and `tp` the collectives the blocks call
// where a split matmul's partial results meet.
#pragma once

#include "backend/backend.h"
#include "model/activations.h"
#include "model/llama_config.h"
#include "model/tensor_parallel.h"

namespace anvil {

struct VocabParallelScratch;  // model/vocab_parallel.h

struct BlockContext {
  Backend* backend = nullptr;
  const LlamaConfig* config = nullptr;
  StepDims dims;
  Tensor positions;  // (B, T) i32 absolute positions of the rows
  Tensor doc_ids;    // (B, T) i32, or undefined for plain causal attention
  Tensor ones;       // (N, 1) f32 ones when the config has attention bias
  RopeParams rope;
  // (C) f32 sink for the weight gradient of a frozen norm (LoRA): rmsnorm_backward always
  // writes one, and a frozen base has no gradient buffer to receive it. Undefined otherwise.
  Tensor norm_grad_sink;
  TensorParallel tp;
  int64_t vocab_begin = 0;  // first vocabulary row of this tp rank's embedding and head shards
  VocabParallelScratch* vocab_parallel = nullptr;  // the head's buffers under tp; else nullptr

  // Sums `t` over the tp ranks in place (a no-op without tensor parallelism).
  void tp_all_reduce(const Tensor& t) const {
    if (tp.enabled()) tp.ops->all_reduce(t);
  }

  // Returns g when the weight is trained, otherwise the sink (frozen norm weights).
  const Tensor& norm_grad(const Tensor& g) const { return g.defined() ? g : norm_grad_sink; }

  // Returns the attention op settings of this step (causal, doc mask when doc_ids defined).
  AttentionParams attention() const {
    AttentionParams params;
    params.causal = true;
    params.doc_ids = doc_ids.defined() ? &doc_ids : nullptr;
    return params;
  }
};

}  // namespace anvil
