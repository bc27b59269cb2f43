// RankState: what a rank of the data-parallel engine holds beside its model and where, by
// group and by pool: exactly the buffers of its sizing list (rank_buffers.h), allocated once
// when the engine is built. The other parts of the engine (the weight gatherer, the gradient
// reducer, the optimizer step, the checkpoint weight I/O) read and write these buffers; none
// of them allocates. A buffer a mode does not use is empty (data() == nullptr; a pool of no
// slots).
#pragma once

#include <array>
#include <vector>

#include "core/buffer.h"
#include "parallel/rank_buffers.h"
#include "parallel/slot_pool.h"

namespace anvil {

// One trainable group's buffers (RankBufferKind of the same names).
struct GroupStorage {
  Buffer replica;            // stages 1-2: the full (padded) weights, bound to the model (in
                             // mixed precision: the compute-dtype group, as a weight slot holds it)
  Buffer weight_shard;       // sharded masters: this rank's fsdp shard of the weights (f32; stage 3
                             // offloaded: offloaded_shard_bytes, refreshed from the host master)
  Buffer grad_shard;         // stages 2-3: this rank's fsdp shard of the reduced gradient (not on
                             // the device when the shards are offloaded)
  Buffer grad_sum;           // stages 0-1, world rank 0, several micro-batches: running sum
  Buffer reduce_cast;        // stages 0-1, fast bf16 reduction: the gradient cast to bf16
  int optimizer_index = -1;  // this group's index in the AdamW groups; -1 when empty
};

class RankState {
 public:
  RankState() = default;
  // Allocates the device entries of `sizing` on `device`, zeroed (the weights start at zero;
  // slots and staging are written before they are read). `groups` and `frozen_groups` are the
  // trainable and (LoRA) frozen group counts.
  RankState(Backend& device, RankBuffers sizing, int groups, int frozen_groups);
  RankState(RankState&&) = default;
  RankState& operator=(RankState&&) = default;

  // Allocates the host entries of the list on `host` (the host optimizer's backend, which
  // must outlive them: release_host frees them first).
  void allocate_host(Backend& host);
  void release_host();

  const RankBuffers& sizing() const { return sizing_; }
  GroupStorage& group(int g) { return groups_[static_cast<size_t>(g)]; }
  const GroupStorage& group(int g) const { return groups_[static_cast<size_t>(g)]; }
  const Buffer& frozen_shard(int g) const { return frozen_shards_[static_cast<size_t>(g)]; }
  // Returns `elements` of `dtype` at `byte_offset` in group g's weight shard (on the device,
  // or with offload_params in host memory).
  Tensor weight_shard_view(int g, DType dtype, size_t byte_offset, int64_t elements) const;
  // Returns this rank's shard of frozen group g (LoRA, stage 3) as `dtype` (the base's).
  Tensor frozen_shard_view(int g, DType dtype) const;
  // Pools by index (0: layers and what fits their slots, 1: the larger outer groups).
  std::array<SlotPool, 2>& weight_pools() { return weight_pools_; }
  const std::array<SlotPool, 2>& weight_pools() const { return weight_pools_; }
  SlotPool& gradient_pool(size_t k) { return gradient_pools_[k]; }
  const SlotPool& scatter_scratch(size_t k) const { return scatter_scratch_[k]; }
  SlotPool& shard_staging(size_t k) { return shard_staging_[k]; }
  const SlotPool& shard_staging(size_t k) const { return shard_staging_[k]; }
  const SlotPool& running_sum_slot() const { return running_sum_slot_; }
  const SlotPool& running_sum_source() const { return running_sum_source_; }
  const Buffer& step_results() const { return step_results_; }
  const Buffer& host_cast_staging() const { return host_cast_staging_; }

 private:
  RankBuffers sizing_;
  std::vector<GroupStorage> groups_;
  std::vector<Buffer> frozen_shards_;        // stage 3, LoRA
  std::array<SlotPool, 2> weight_pools_;     // stage 3
  std::array<SlotPool, 2> gradient_pools_;   // stages 2-3
  std::array<SlotPool, 2> scatter_scratch_;  // stages 2-3, fast: beside gradient slot s
  std::array<SlotPool, 2> shard_staging_;    // stage 3 offloaded
  SlotPool running_sum_slot_;                // stages 2-3, exact, several micro-batches
  SlotPool running_sum_source_;              // stage 3 offloaded, exact, several micro-batches
  Buffer step_results_;
  Buffer host_cast_staging_;  // stage 3 offloaded, 16-bit gathers (host memory)
};

}  // namespace anvil
