// DataParallelEngine's planning side (engine_plan.h): the memory a run would hold and the
// collectives a step would run, computed from the same shard plans, slot sizes and model planned_memory that the
// engine allocates from, so `anvil plan` and a run's memory report and traffic counters speak
// one vocabulary. Nothing here allocates. The gradient and weight collectives are exact (a
// test compares them with the counting communicators); the model's own tensor- and
// context-parallel exchanges are estimates from the block structure.
#include "parallel/engine_plan.h"

#include <algorithm>
#include <functional>

#include "model/llama_parameters.h"
#include "model/lora.h"
#include "model/tensor_parallel.h"
#include "parallel/engine.h"
#include "parallel/rank_buffers.h"

namespace anvil {
namespace {

// Returns `options` as the engine builds its model on a rank of `shape` (rank 0 of tp and cp;
// the collectives are not needed to plan).
ModelOptions mesh_model_options(const ModelOptions& options, const MeshShape& shape,
                                const ParallelSettings& parallel) {
  ModelOptions model = DataParallelEngine::model_options(options, parallel.zero_stage);
  model.tp.size = shape.tp;
  model.tp.rank = 0;
  model.tp.ops = nullptr;
  model.tp.sequence_parallel = parallel.sequence_parallel;
  model.cp.size = shape.cp;
  model.cp.rank = 0;
  model.cp.ops = nullptr;
  return model;
}

// The layouts a rank of `shape` trains and (LoRA) holds frozen, and their shard plans.
struct PlannedLayouts {
  LlamaConfig shard;
  std::shared_ptr<const ParameterLayout> trainable;
  std::shared_ptr<const ParameterLayout> frozen;  // LoRA only
  ShardPlan plan;
  ShardPlan frozen_plan;  // LoRA only
};

// Returns how many shards ZeRO cuts the state into (DeviceMesh::shard_count).
int shard_count(const MeshShape& shape, int zero_stage) {
  return zero_stage == 0 ? 1 : shape.fsdp * shape.cp;
}

PlannedLayouts planned_layouts(const LlamaConfig& config, const ModelOptions& options,
                               const MeshShape& shape, int zero_stage, int data_rank) {
  const LlamaConfig shard = tp_shard_config(config, shape.tp);
  const int data_world = shape.dp * shape.fsdp * shape.cp;
  const int shards = shard_count(shape, zero_stage);
  PlannedLayouts out;
  out.shard = shard;
  const auto base = make_llama_layout(shard, options.decay_embeddings);
  if (options.lora.enabled()) {
    out.trainable = make_lora_layout(shard, options.lora);
    out.frozen = base;
    out.frozen_plan = ShardPlan(*base, data_world, shards, data_rank);
  } else {
    out.trainable = base;
  }
  out.plan = ShardPlan(*out.trainable, data_world, shards, data_rank);
  return out;
}

// Returns the sizing list of data rank `data_rank` (rank 0 of tp and cp) of `shape`.
RankBuffers planned_buffers(const PlannedLayouts& layouts, const ModelOptions& model,
                            const ParallelSettings& parallel, const MeshShape& shape,
                            int micro_batches, int data_rank) {
  RankBufferInputs inputs;
  inputs.shard_config = layouts.shard;
  inputs.trainable = layouts.trainable.get();
  inputs.plan = &layouts.plan;
  inputs.frozen_plan = model.lora.enabled() ? &layouts.frozen_plan : nullptr;
  inputs.model = model;
  inputs.parallel = parallel;
  inputs.micro_batches = micro_batches;
  inputs.data_rank = data_rank;
  inputs.data_world = shape.dp * shape.fsdp * shape.cp;
  return plan_rank_buffers(inputs);
}

}  // namespace

PlannedMemory planned_rank_memory(const LlamaConfig& config, const ModelOptions& options,
                                  const ParallelSettings& parallel, int world, int micro_batches,
                                  int data_rank) {
  const MeshShape shape = resolve_mesh_shape(parallel, world);
  const int zero_stage = static_cast<int>(parallel.zero_stage);
  const ModelOptions rank_options = mesh_model_options(options, shape, parallel);
  const ModelMemory model = LlamaModel::planned_memory(config, rank_options);
  PlannedMemory report;
  report.frozen = static_cast<int64_t>(model.frozen);
  report.weights = static_cast<int64_t>(model.trainable);
  report.gradients = static_cast<int64_t>(model.gradients);
  report.activations = static_cast<int64_t>(model.activations);
  report.workspace = static_cast<int64_t>(model.compute_copies + model.ring_scratch);
  report.comm_buffers = static_cast<int64_t>(model.ring_blocks);

  // What the engine allocates beside the model: its sizing list.
  const PlannedLayouts layouts = planned_layouts(config, options, shape, zero_stage, data_rank);
  const RankBuffers buffers =
      planned_buffers(layouts, rank_options, parallel, shape, micro_batches, data_rank);
  const MemoryByCategory device = buffers.bytes(false);
  auto at = [&](MemoryCategory c) { return device[static_cast<size_t>(c)]; };
  report.frozen += at(MemoryCategory::frozen_weights);
  report.weights += at(MemoryCategory::trainable_weights);
  report.gradients += at(MemoryCategory::gradients);
  report.optimizer += at(MemoryCategory::optimizer_state);
  report.comm_buffers += at(MemoryCategory::communication);
  report.workspace += at(MemoryCategory::workspace);
  report.host = buffers.bytes(true);

  const ShardPlan& plan = layouts.plan;
  const bool fast = parallel.reduce_mode() == ReduceMode::fast;
  const int data_world = shape.dp * shape.fsdp * shape.cp;
  const int64_t reduced_size = static_cast<int64_t>(dtype_size(buffers.reduce_dtype));
  const int64_t f32 = sizeof(float);
  // MPI runs exact sums and 16-bit ones as ordered sums; a fast f32 sum is the library's.
  if (data_world > 1 && (!fast || buffers.reduce_dtype != DType::f32)) {
    // An ordered sum adds the contributions as they arrive (comm/mpi/mpi_handles.h): two
    // receive buffers of the rank's slice, for a 16-bit sum f32 totals of the slice, and for
    // an all-reduce a copy of its own chunk (ranks > 0). Planned for the rank that holds the
    // most (a run reports the peak over ranks): one above 0 with the largest chunk. The NCCL
    // communicator's device scratch (comm/exchange_schedule.h: ranks - 1 pieces of about
    // 2 / ranks slices, one slice on two ranks) fits in this too, up to `ranks` elements of
    // rounding.
    const int64_t receive_buffers = std::min(data_world - 1, 2);
    const int64_t per_element = receive_buffers * reduced_size + (reduced_size < f32 ? f32 : 0);
    if (zero_stage <= 1) {
      for (int g = 0; g < plan.group_count(); ++g) {
        const int64_t numel = plan.group(g).numel;
        const int64_t chunk = (numel + data_world - 1) / data_world;
        report.collective_staging += (per_element + reduced_size) * chunk;
      }
    } else {
      // As many reduce-scatters as the gradient slots let start before the oldest finishes:
      // one per slot of pool 0 (at most its size), and pool 1's groups at their own sizes (the
      // largest; with tied embeddings each of them, the table's slot being pinned).
      const GradientSlotPlan& slots = buffers.gradient_slots;
      int64_t outer = 0;
      for (int g = 0; g < plan.group_count(); ++g) {
        if (slots.pool[static_cast<size_t>(g)] != 1) continue;
        const int64_t padded = plan.group(g).padded;
        outer = config.tie_embeddings ? outer + padded : std::max(outer, padded);
      }
      report.collective_staging =
          (slots.count[0] * slots.elements[0] + outer) / data_world * per_element;
    }
  }
  return report;
}

std::vector<PlannedCollective> planned_step_collectives(
    const LlamaConfig& config, const ModelOptions& options, const ParallelSettings& parallel,
    int world, int micro_batches, int64_t micro_batch_rows) {
  using Kind = PlannedCollective::Kind;
  const MeshShape shape = resolve_mesh_shape(parallel, world);
  const int zero_stage = static_cast<int>(parallel.zero_stage);
  const PlannedLayouts layouts = planned_layouts(config, options, shape, zero_stage, 0);
  const RankBuffers buffers = planned_buffers(
      layouts, mesh_model_options(options, shape, parallel), parallel, shape, micro_batches, 0);
  const ShardPlan& plan = layouts.plan;
  const int data_world = shape.dp * shape.fsdp * shape.cp;
  const int shards = shard_count(shape, zero_stage);  // the engine's fsdp() axis
  const int replicas = data_world / shards;          // and its dp() axis
  const int64_t m = micro_batches, f32 = sizeof(float);
  const bool fast = parallel.reduce_mode() == ReduceMode::fast;
  const int64_t reduced = static_cast<int64_t>(
      dtype_size(reduction_dtype(parallel, data_world)));
  int64_t numel = 0, padded = 0, shard = 0;
  for (int g = 0; g < plan.group_count(); ++g) {
    const GroupShard& s = plan.group(g);
    if (s.numel == 0) continue;
    numel += s.numel;
    padded += s.padded;
    shard += s.shard;
  }
  std::vector<PlannedCollective> out;
  auto add = [&](const char* axis, const char* what, Kind kind, int ranks, int64_t bytes,
                 bool overlapped, bool estimate = false) {
    if (bytes > 0) out.push_back({axis, what, kind, ranks, bytes, overlapped, estimate});
  };
  // The token count (one word per rank) and the loss sums (one double per micro-batch); a
  // world of one exchanges no host values (parallel/collectives.h).
  if (data_world > 1)
    add("data", "token count and loss sums", Kind::all_gather, data_world,
        int64_t{data_world} * 8 * (1 + m), false);
  if (zero_stage <= 1) {
    // Fast: the micro-steps accumulate locally and the last one reduces.
    const int64_t reductions = fast ? 1 : m;
    if (data_world > 1)
      add("data", "gradient all-reduce", Kind::all_reduce, data_world,
          reductions * numel * reduced, true);
  } else {
    add("data", "gradient reduce-scatter", Kind::reduce_scatter, data_world,
        m * padded * reduced, true);
    if (replicas > 1)
      add("dp", "gradient shard assembly", Kind::all_gather, replicas, m * shard * f32, true);
    if (!fast)
      add("data", "running-sum gather", Kind::all_gather, data_world, (m - 1) * padded * f32,
          true);
  }
  // Stages 1-2: each rank stepped its shard of the replica; the replicas are gathered back
  // (in mixed precision in the compute dtype, every group gathered, norms packed in f32).
  if (buffers.compute_replica) {
    int64_t bytes = 0;
    for (const SlotLayout& slot : buffers.weight_slots.groups) bytes += slot.gather_bytes;
    add("fsdp", "weight all-gather after the step", Kind::all_gather, shards, bytes, false);
  } else if ((zero_stage == 1 || zero_stage == 2) && shards > 1) {
    add("fsdp", "weight all-gather after the step", Kind::all_gather, shards, padded * f32,
        false);
  }
  if (zero_stage == 3) {
    add("fsdp", "weight all-gather", Kind::all_gather, shards,
        stage3_gather_bytes(layouts.shard, micro_batches, buffers.weight_slots,
                            parallel.prefetch),
        true);
  }
  // Tensor parallelism (estimate, (N, C) f32 sums of one micro-batch each): the row-parallel
  // outputs of attention and MLP in forward and the column-parallel input gradients in
  // backward, plus the vocabulary-parallel embedding and head; under sequence parallelism a
  // half-block gathers its input and reduce-scatters its output in forward, and in backward
  // gathers the residual gradient and its input again and reduce-scatters the input gradient.
  // Recomputation repeats the forward of every layer but the last.
  if (shape.tp > 1) {
    const int64_t layers = config.n_layers;
    const int64_t activation = micro_batch_rows * config.dim * f32;
    const int64_t recomputed =
        options.activation_checkpointing ? std::max<int64_t>(0, layers - 1) : 0;
    if (parallel.sequence_parallel) {
      const int64_t sums = m * (10 * layers + 4 + 4 * recomputed);
      add("tp", "sequence-parallel gathers and scatters", Kind::all_gather, shape.tp,
          sums * activation, false, true);
    } else {
      const int64_t sums = m * (4 * layers + 2 + 2 * recomputed);
      add("tp", "activation all-reduce", Kind::all_reduce, shape.tp, sums * activation, false,
          true);
    }
  }
  // Context parallelism (estimate): ring attention passes each rank's keys and values on
  // cp - 1 times per layer in forward (again when recomputed) and in backward, where the f32
  // key/value gradients travel cp times (the last pass returns them to their owner).
  if (shape.cp > 1) {
    const LlamaConfig shard = tp_shard_config(config, shape.tp);
    const int64_t layers = config.n_layers;
    const int64_t kv = 2 * micro_batch_rows * shard.kv_dim();
    const int64_t kv_bytes = kv * static_cast<int64_t>(dtype_size(options.compute_dtype));
    const int64_t recomputed =
        options.activation_checkpointing ? std::max<int64_t>(0, layers - 1) : 0;
    const int64_t blocks = (shape.cp - 1) * kv_bytes * (2 * layers + recomputed) +
                           int64_t{shape.cp} * kv * f32 * layers;
    // Each block is counted once sent and once received.
    add("cp", "ring attention exchange", Kind::exchange, shape.cp, 2 * m * blocks, true, true);
  }
  return out;
}

}  // namespace anvil
