// The data-parallel engine's planning side (engine_plan.cpp): what a rank of a run would hold
// and the collectives a step would run, computed from the same sizing list (rank_buffers.h),
// shard plans and model planned_memory that DataParallelEngine allocates from, allocating
// nothing. `anvil plan`, the pre-flight check and the plan-equals-run tests read it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/memory_category.h"
#include "model/llama.h"
#include "parallel/parallel_settings.h"

namespace anvil {

// One kind of collective a training step runs (planned_step_collectives).
struct PlannedCollective {
  enum class Kind { all_reduce, all_gather, reduce_scatter, exchange };  // exchange: send+recv
  const char* axis = "";  // the mesh axis, as MeshTraffic and the traces name it
  const char* what = "";  // "gradient reduce-scatter", ...
  Kind kind = Kind::all_reduce;
  int ranks = 1;          // the axis's group size
  int64_t payload_bytes = 0;  // per step, counted as CountingCommunicator counts them
  bool overlapped = true;     // issued asynchronously while compute goes on
  bool estimate = false;      // the model's tp/cp collectives: estimated, not exact
};

// The bytes a rank's buffers would hold, by kind, as `anvil plan` predicts them from the
// engine's own sizing functions (planned_rank_memory). What a run holds is 
// measured by the backend's counters (DataParallelEngine::memory()).
struct PlannedMemory {
  int64_t frozen = 0;        // the frozen LoRA base (its shards under stage 3)
  int64_t weights = 0;       // f32 trainable weights (their shards under stage 3)
  int64_t gradients = 0;
  int64_t optimizer = 0;     // AdamW m and v
  int64_t comm_buffers = 0;  // gather / reduce slots (stages 2-3), fast reduction scratch
  int64_t activations = 0;   // the model's activation arena
  int64_t workspace = 0;     // compute-dtype weight copies (mixed precision)
  // Not held at setup: the receive buffers of the ordered sums while they run (communication),
  // two of this rank's slice per sum (and a copy of its own chunk in an all-reduce). Stages
  // 0-1 all-reduce every group's gradient and hold them until the micro-step ends; stages 2-3
  // have as many reduce-scatters in flight as the gradient slots allow: one per layer slot,
  // plus the head's (and with tied embeddings the table's) at their own sizes (measured on the
  // tiny preset: up to exactly that, depending on timing). None with one data rank, nor for
  // fast f32 reductions (the library's sums); fast bf16 ones stage bf16 copies and f32 totals.
  int64_t collective_staging = 0;
  // Offload (parallel.offload): what the host optimizer holds in host memory, by category:
  // AdamW moments, f32 masters and gradient copies of the shard (and, stage 3 with a bf16
  // model, the buffer a master shard is cast in before it goes up). The categories above are
  // the device's alone.
  MemoryByCategory host{};
  int64_t total() const {
    return frozen + weights + gradients + optimizer + comm_buffers + activations + workspace;
  }
  // Returns the same bytes under the categories the backends measure.
  MemoryByCategory by_category() const {
    return {frozen, weights, gradients, optimizer, activations, comm_buffers, workspace};
  }
};

// What a run would hold and send, from the shard plans and the model's planned_memory alone.
// `options` are the run's model options before DataParallelEngine::model_options();
// `parallel` and `world` what the DeviceMesh is built from; `micro_batches` per step. Returns
// the memory() data rank `data_rank` would report (rank 0 holds the most).
PlannedMemory planned_rank_memory(const LlamaConfig& config, const ModelOptions& options,
                                  const ParallelSettings& parallel, int world, int micro_batches,
                                  int data_rank = 0);
// Returns the collectives one optimizer step runs on data rank 0, by axis and kind, with the
// payload bytes the mesh's counting communicators would count (MeshTraffic);
// `micro_batch_rows` is one micro-batch's rows on a rank (batch x seq_len / cp).
std::vector<PlannedCollective> planned_step_collectives(const LlamaConfig& config,
                                                        const ModelOptions& options,
                                                        const ParallelSettings& parallel,
                                                        int world, int micro_batches,
                                                        int64_t micro_batch_rows);

}  // namespace anvil
