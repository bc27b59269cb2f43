// The one sizing list of the data-parallel engine: plan_rank_buffers turns what a rank trains
// (its model options and shard plans) and how (the [parallel] settings, micro-batches, its data
// rank) into every buffer the engine holds beside the model, each with its kind, category,
// place and size. The engine allocates exactly this list (DataParallelEngine's constructor)
// and `anvil plan` sums it (planned_rank_memory), so the stage x offload x
// precision x reduce-mode x LoRA branching is written here alone. The model's own buffers
// (LlamaModel::planned_memory) and the collectives' transient staging are not in the list.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/exact_square_sum.h"
#include "core/memory_category.h"
#include "model/llama.h"
#include "parallel/mesh.h"
#include "parallel/shard_plan.h"
#include "parallel/slot_plans.h"

namespace anvil {

enum class RankBufferKind {
  replica,             // stages 1-2: the weights the model computes with (per group)
  master_shard,        // this rank's fsdp shard of the weights (per group; see the .cpp)
  gradient_shard,      // stages 2-3: this rank's shard of the reduced gradient (per group)
  gradient_sum,        // stages 0-1, exact, data rank 0, several micro-batches (per group)
  reduce_cast,         // stages 0-1, 16-bit fast reduction: the gradient cast (per group)
  frozen_shard,        // stage 3, LoRA: this rank's shard of the frozen base (per group)
  weight_slots,        // stage 3: the gather slots of one pool
  gradient_slots,      // stages 2-3: the full-gradient slots of one pool
  running_sum_slot,    // stages 2-3, exact, several micro-batches: the running sum's gather
  scatter_scratch,     // stages 2-3, fast: the scratch beside the gradient slots of one pool
  shard_staging,       // stage 3 offloaded: where reduced shards wait for their copy out
  running_sum_source,  // stage 3 offloaded, exact, several micro-batches: the slice going up
  step_results,        // the loss sums and the norm's counters the host reads once a step
  optimizer_moments,   // AdamW m and v of the shard (allocated by the optimizer)
  host_master,         // offload: the host optimizer's f32 master of the shard
  host_gradient,       // offload: the host optimizer's copy of the gradient shard
  host_cast_staging,   // stage 3 offloaded, 16-bit gathers: a master shard cast on the host
};

// One buffer (or, for the slot kinds, `count` equal slots) a rank holds.
struct RankBuffer {
  RankBufferKind kind = RankBufferKind::replica;
  int index = -1;  // the group (per-group kinds) or the pool (slot kinds); -1 otherwise
  MemoryCategory category = MemoryCategory::workspace;
  bool host = false;  // in the host optimizer's memory rather than the model's backend
  int count = 1;
  size_t bytes = 0;  // of each
  int64_t total() const { return static_cast<int64_t>(bytes) * count; }
};

// What decides a rank's buffers.
struct RankBufferInputs {
  LlamaConfig shard_config;                    // this tp rank's model config
  const ParameterLayout* trainable = nullptr;  // its trainable layout
  const ShardPlan* plan = nullptr;             // the trainable groups' shards
  const ShardPlan* frozen_plan = nullptr;      // LoRA: the frozen base's; null otherwise
  ModelOptions model;  // the rank's model options (compute dtype, LoRA, base dtype)
  ParallelSettings parallel;
  int micro_batches = 1;
  int data_rank = 0;
  int data_world = 1;
};

// The list and the plans it was sized from, which the engine lays its buffers out by.
struct RankBuffers {
  // Stages 1-2 in mixed precision (not LoRA): the weights held once in the compute dtype,
  // laid out as a stage-3 slot per group, beside sharded f32 masters.
  bool compute_replica = false;
  DType gather_dtype = DType::f32;  // what layer groups travel in when masters are sharded
  DType reduce_dtype = DType::f32;  // what gradients travel in (reduction_dtype)
  WeightSlotPlan weight_slots;      // stage 3, and the layout of a compute replica
  GradientSlotPlan gradient_slots;  // stages 2-3
  GradientSlotPlan shard_staging;   // stage 3 offloaded
  std::array<ScatterScratch, 2> scatter_scratch{};  // stages 2-3, fast, per gradient pool
  std::vector<RankBuffer> buffers;

  // Returns the bytes of the device's (host = false) or the host's buffers, by category.
  MemoryByCategory bytes(bool host) const;
  // Returns the entry of `kind` for group or pool `index`, or null when there is none.
  const RankBuffer* find(RankBufferKind kind, int index = -1) const;
};

// Returns whether the model computes with weights the engine binds in the compute dtype:
// mixed precision without LoRA, under stages 1-3 (stage 0's model keeps its own copies).
bool binds_compute_weights(const ModelOptions& model, int zero_stage);

// Returns the buffers a rank with `inputs` holds.
RankBuffers plan_rank_buffers(const RankBufferInputs& inputs);

// The gradient norm's digit counters on the device.
inline constexpr int64_t kNormCounterBytes = kExactCounterCount * sizeof(uint64_t);

// Returns the bytes of the step's results on the device (workspace), which the host reads
// back once a step: a double loss sum per micro-batch, then the norm's digit counters (none
// with offload, where the norm reads the host optimizer's gradient copies).
int64_t step_result_bytes(int micro_batches, bool offload);

}  // namespace anvil
