// The slot plans of the data-parallel engine: how big each kind of transient slot is (stage-3
// weight slots, stages 2-3 gradient slots, offload staging, fast-reduction scratch), what a
// weight slot holds for each group, and which gathers a stage-3 pass runs through them. The
// engine's buffers (rank_buffers.h) are sized from these functions and `anvil plan` sums the
// same list, so the two never disagree. Nothing here allocates.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/compute_weights.h"
#include "model/llama.h"
#include "parallel/parallel_settings.h"
#include "parallel/shard_plan.h"

namespace anvil {

// Where stage 3 puts one group in a weight slot (byte offsets into the slot). A group
// travels either whole in f32 (f32 models; the embedding table, a lookup; LoRA) or, in a
// mixed-precision model, whole in the compute dtype plus its f32 parts (norms, as the model
// reads them: ComputeWeights::parts) packed: each fsdp rank contributes the f32 parts inside
// its shard, padded to `packed` elements, and the receiver unpacks them in parts order.
struct SlotLayout {
  bool compute = false;       // gathered in the compute dtype (+ packed f32 parts)
  bool cast_locally = false;  // f32 gather that the model also reads in the compute dtype
  ComputeParts parts;         // mixed precision only
  int64_t packed = 0;         // compute: f32 part elements per rank in the packed gather
  size_t f32_offset = 0;      // the f32 group, or (compute) its unpacked f32 parts
  size_t compute_offset = 0;  // the compute-dtype group
  size_t packed_offset = 0;   // compute: the packed gather (fsdp x packed f32)
  size_t frozen_offset = 0;   // LoRA: the frozen base (its dtype)
  size_t bytes = 0;           // the end of the last area
  int64_t gather_bytes = 0;   // what one gather of the group moves (all areas)
};
// The stage-3 weight slots: two pools, each slot sized for the largest group it serves;
// the engine allocates and `anvil plan` counts exactly these. Pool 0 serves the layers and
// every embedding or head group that fits in a layer slot (a slot of its own would sit idle
// while the layers run; FSDP2's caching allocator reuses that memory the same way); pool 1
// the larger ones and a tied embedding, pinned for the whole pass.
struct WeightSlotPlan {
  std::vector<SlotLayout> groups;
  std::vector<int> pool;  // per group: the pool it is gathered into
  std::array<size_t, 2> bytes{};
  std::array<int, 2> count{};
};
// Returns the slot plan of a rank holding `plan` (and with LoRA `frozen_plan`, in
// `frozen_dtype`) of a model with `shard_config` and trainable `layout`; `gather_dtype` is
// the compute dtype the layer groups travel in (f32: everything travels in f32);
// `prefetch` groups are gathered ahead of the one in use; without `reshard_after_forward`
// every layer keeps a slot of its own for the whole step.
WeightSlotPlan plan_weight_slots(const LlamaConfig& shard_config, const ParameterLayout& layout,
                                 const ShardPlan& plan, const ShardPlan* frozen_plan,
                                 DType frozen_dtype, DType gather_dtype, int prefetch,
                                 bool reshard_after_forward);
// Returns the kind of `group` (0: a layer, 1: the embedding or the head).
int slot_kind(const LlamaConfig& config, int group);
// The full-gradient slots of stages 2-3, two pools, each slot sized for the largest padded
// group it serves (elements). Pool 0: two slots (the group in backward and one whose
// reduce-scatter is in flight) for the layers and every embedding or head group that fits;
// pool 1: the larger ones (one slot; with tied embeddings also the table's, bound from the
// fused head to the end of the pass, which always has its own). No slot for a group without
// trainable elements (LoRA's embedding and head).
struct GradientSlotPlan {
  std::vector<int> pool;  // per group: the pool its gradient is reduced from
  std::array<int64_t, 2> elements{};
  std::array<int, 2> count{};
};
GradientSlotPlan plan_gradient_slots(const LlamaConfig& config, const ShardPlan& plan);
// Assigns each group with a slot of `sizes[g]` (0: none) to a pool: pool 0 for the layers
// and each embedding or head group no larger than the largest layer, pool 1 for the rest and
// a tied embedding; sets the slots pool 1 needs. Returns the largest size in each pool.
std::array<int64_t, 2> assign_pools(const LlamaConfig& config, const std::vector<int64_t>& sizes,
                                    std::vector<int>& pool, int& outer_slots);
// Stage 3 with offload: the staging slots a reduced gradient shard waits in for its copy to
// the host, as many per pool as the gradient slots (each sized for the pool's largest shard).
GradientSlotPlan plan_shard_staging(const LlamaConfig& config, const ShardPlan& plan);
// Stage 3 with offload: the bytes of a group's device shard, what its gathers read: the
// shard in the compute dtype followed by its packed f32 parts (layout.compute), else in f32.
size_t offloaded_shard_bytes(const SlotLayout& layout, const GroupShard& shard, DType gather_dtype);
// The byte offset of the packed f32 parts in such a shard.
size_t offloaded_packed_offset(const GroupShard& shard, DType gather_dtype);
// Returns the dtype gradients travel in: the reduce dtype in fast mode with several data
// ranks, else f32 (exact sums are f32; one rank reduces nothing, so rounds nothing).
DType reduction_dtype(const ParallelSettings& settings, int data_world);
// Fast mode, stages 2-3: the scratch beside each gradient slot of `elements` (the largest
// padded group of its pool; elements / data_world per world slice): with a bf16 reduction
// the slot cast to bf16 and the bf16 slice received, and with several micro-batches the f32
// slice a later micro-step receives (or casts back) before adding it into the shard.
// Offsets in bytes; bytes is 0 when nothing is needed.
struct ScatterScratch {
  size_t received_offset = 0;
  size_t partial_offset = 0;
  size_t bytes = 0;
};
ScatterScratch plan_scatter_scratch(int64_t elements, int data_world, DType dtype,
                                    int micro_batches);
// One piece of a packed f32 gather: `length` elements at `group_offset` in the group, at
// `unpacked_offset` in the unpacked parts.
struct PackedPiece {
  int64_t group_offset = 0;
  int64_t length = 0;
  int64_t unpacked_offset = 0;
};
// Returns, in packed order, the f32 parts of a compute-gathered group inside fsdp shard `f`
// of `shard` elements.
std::vector<PackedPiece> packed_pieces(const ComputeParts& parts, int64_t shard, int f);

// Returns the bytes one step's stage-3 weight gathers move, playing the passes of
// `micro_batches` micro-batches through the slot choices of acquire/release/prefetch.
int64_t stage3_gather_bytes(const LlamaConfig& config, int micro_batches,
                            const WeightSlotPlan& slots, int prefetch);
// Returns the order in which a train (or eval) pass reads the groups' weights under stage 3.
std::vector<int> stage3_weight_uses(const LlamaConfig& config, bool train);

}  // namespace anvil
