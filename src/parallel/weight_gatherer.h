// WeightGatherer: the engine's gathering part. Under ZeRO-3 it makes each group's whole
// weights available to the model before each use: it all-gathers the group's shards (in the
// gather dtype, the f32 norm parts packed beside them, with LoRA the frozen base too) into a
// slot of the rank's weight pools, prefetches the next `prefetch` groups of the pass, keeps a
// slot until the pass moves on (or, with reshard_after_forward = false, for the whole step)
// and re-points the model's views at the slot. Stages 1-2 in mixed precision use its gather
// and unpacking to spread an updated replica after the step (DataParallelEngine's publish).
// It allocates nothing: slots and shards are the rank's (RankState). Every rank makes the
// same calls in the same order, so the gathers match across ranks.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/llama.h"
#include "parallel/mesh.h"
#include "parallel/rank_state.h"
#include "parallel/shard_plan.h"

namespace anvil {

class WeightGatherer {
 public:
  WeightGatherer() = default;
  // Gathers `plan`'s groups (and with LoRA `frozen_plan`'s) of `model` over `mesh`'s fsdp axis
  // into `state`'s weight pools; all must outlive the gatherer.
  WeightGatherer(LlamaModel& model, DeviceMesh& mesh, const ShardPlan& plan,
                 const ShardPlan* frozen_plan, RankState& state);

  // Sets what runs before a group's shard is read by a gather (offload: refresh the device
  // shard from the host master when the master is newer).
  void set_before_gather(std::function<void(int)> before_gather) {
    before_gather_ = std::move(before_gather);
  }

  // Starts a pass (train: forward then backward) and ends it, unpinning every slot.
  void begin_pass(bool train);
  void end_pass();
  // Returns the order in which the current pass reads the groups' weights.
  const std::vector<int>& uses() const { return uses_; }
  // Makes group g's gathered weights available to the model, prefetching the next groups of
  // the pass; release lets its slot go (a tied embedding stays pinned until end_pass).
  void acquire(int group);
  void release(int group);
  // Advances the gathers in flight without blocking; waits for all of them; forgets every
  // cached group (the shards changed).
  void poll();
  void wait_all();
  void forget_cached();

  // Starts the gathers of group g's trainable weights and (with_frozen, LoRA) frozen base into
  // `target`, laid out as the slot plan says (each rank casts its master shard into its place
  // first); returns their handles.
  std::vector<std::unique_ptr<CommHandle>> gather_into(int group, const Buffer& target,
                                                       bool with_frozen);
  // Starts group g's gathers into slot `slot` of its pool.
  void start_gather(int group, int slot, bool with_frozen);
  // Mixed precision: unpacks the gathered f32 parts of `target` (or casts a group gathered in
  // f32 that the model also reads in the compute dtype); binds the group's views to `target`.
  void prepare(int group, const Buffer& target);
  void bind_views(int group, const Buffer& target);
  SlotPool& pool(int group);

 private:
  const SlotLayout& layout(int group) const {
    return state_->sizing().weight_slots.groups[static_cast<size_t>(group)];
  }
  DType gather_dtype() const { return state_->sizing().gather_dtype; }
  bool in_prefetch_window(int group) const;
  void prefetch_next();
  void bind_gathered(int group, int slot);
  Tensor frozen_slot_view(int slot, int group);

  LlamaModel* model_ = nullptr;
  DeviceMesh* mesh_ = nullptr;
  const ShardPlan* plan_ = nullptr;
  const ShardPlan* frozen_plan_ = nullptr;  // LoRA only
  RankState* state_ = nullptr;
  bool shards_offloaded_ = false;  // stage 3 with offload: the shard is in the gather dtype
  bool params_offloaded_ = false;  // ... and in host memory (offload_params)
  std::function<void(int)> before_gather_;
  std::vector<int> uses_;  // the order the pass reads groups
  size_t position_ = 0;    // how far the pass has got in uses_
};

}  // namespace anvil
