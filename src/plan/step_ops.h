// The per-op model of one training step on one device, for `anvil plan`'s step time: every
// kernel the step runs (per layer forward and backward, checkpointed recomputation, the head's
// row chunks, the embedding, the optimizer and its gradient passes, LoRA's adapters) with the
// FLOPs it executes and the bytes it reads and writes in device memory, timed as a roofline:
//   op time = launches x (max(FLOPs / ceiling, bytes / memory bandwidth) + launch cost)
// with the ceiling of its kind (tensor-core GEMMs, fused attention, or the vector rate of the
// memory-bound kernels). Instances of one op (all layers, micro-batches and chunks) merge into
// one entry by name, in the order the step first runs them. Sizes come from the planned shard
// config and the model's own arena carve (the head's chunk rows and the logits' dtypes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/llama_config.h"
#include "parallel/mesh.h"
#include "train/config.h"

namespace anvil {

// The groups the report breaks a step into (communication is added from the collectives).
enum class OpKind { gemm, attention, memory, optimizer };
inline constexpr int kOpKindCount = 4;

// Returns the report's name of a kind ("GEMMs", "attention", ...).
const char* op_kind_name(OpKind kind);
// Returns the JSON key of a kind ("gemm", "attention", "memory", "optimizer").
const char* op_kind_key(OpKind kind);

// One op of the step, summed over its launches.
struct PlannedOp {
  std::string name;       // "q_proj forward", "RMSNorm backward", ...
  OpKind kind = OpKind::memory;
  int64_t launches = 0;   // kernel launches per step
  double flops = 0;       // executed per step on this device
  double bytes = 0;       // device memory read + written per step
  double compute_s = 0;   // sum over launches of FLOPs / ceiling
  double memory_s = 0;    // sum over launches of bytes / bandwidth
  double seconds = 0;     // sum over launches of max(compute, memory) + launch cost
  // Returns whether the FLOPs (rather than the bytes) set its time.
  bool compute_bound() const { return compute_s >= memory_s; }
};

// The rates an op is timed against, per second.
struct OpCeilings {
  double gemm_flops = 0;
  double attention_flops = 0;
  double vector_flops = 0;  // elementwise arithmetic of the memory-bound kernels
  double memory_bytes = 0;
  double launch_s = 0;      // per kernel launch
};

// What the step does besides the model's ops, from the engine's plan (per device).
struct StepStateWork {
  int64_t optimizer_elements = 0;  // AdamW's shard on the device (0: offloaded to the host)
  int64_t norm_elements = 0;       // gradient elements the norm pass reads on the device
  int64_t zeroed_elements = 0;     // gradient elements zeroed at the start of the step
  int64_t cast_elements = 0;       // f32 master elements cast to the compute dtype per step
  int64_t cast_launches = 0;       // launches of those casts
  int64_t groups = 0;              // parameter groups the optimizer's passes launch over
};

// The head's chunking as the model's arena carve resolves it.
struct HeadChunking {
  int64_t rows = 1;               // rows of logits per chunk
  DType logits = DType::f32;      // the GEMM's output
  DType dlogits = DType::f32;     // the classifier's gradient output
};

// Returns every op of one training step of `config` on one device of mesh `shape`: the model
// at `shard` (the tensor-parallel shard config of the model), its head chunked as `head`,
// attention over `attention_fraction` of the causal (query, key) pairs (the layers' mean,
// AttentionSchedule::mean_visible_fraction), plus the optimizer's `state` work, timed against
// `ceilings`.
std::vector<PlannedOp> plan_step_ops(const TrainConfig& config, const LlamaConfig& shard,
                                     const MeshShape& shape, const HeadChunking& head,
                                     const StepStateWork& state, double attention_fraction,
                                     const OpCeilings& ceilings);

// One kind's share of the ops.
struct OpKindTotal {
  double seconds = 0;
  double compute_bound_s = 0;  // of seconds: ops whose FLOPs set their time
  double flops = 0;
  double bytes = 0;
  int64_t launches = 0;
  // Returns whether compute-bound ops take most of the kind's time.
  bool compute_bound() const { return compute_bound_s >= seconds - compute_bound_s; }
};

// Returns the ops summed by kind, indexed by OpKind.
std::vector<OpKindTotal> op_kind_totals(const std::vector<PlannedOp>& ops);

}  // namespace anvil
