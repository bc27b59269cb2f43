// WeightIO: the engine's checkpoint weight I/O. Initialisation, checkpoint load and save and
// the frozen LoRA base address groups and elements of model.full_trainable_layout() /
// model.full_layout(), the whole model's coordinates; this part maps them onto what the rank
// holds in its mode: the model's own weights (stage 0), the replica and its f32 master shard
// (stages 1-2 in mixed precision), the master shard on the device or in host memory (stage 3,
// offload), and under tensor parallelism the rank's tp shard (tp_runs). Gathers assemble whole
// groups from every fsdp and tp rank, so checkpoints and exports never depend on the mesh.
// It allocates nothing but a gather's transient target.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "model/llama.h"
#include "parallel/mesh.h"
#include "parallel/offloaded_optimizer.h"
#include "parallel/rank_state.h"
#include "parallel/shard_plan.h"
#include "parallel/weight_gatherer.h"

namespace anvil {

class WeightIO {
 public:
  WeightIO() = default;
  // Reads and writes `model`'s trainable groups as laid out by `plan` (with LoRA the frozen
  // base by `frozen_plan`) in `state`, through `gatherer`'s slots under stage 3; all must
  // outlive this part.
  WeightIO(LlamaModel& model, DeviceMesh& mesh, const ShardPlan& plan,
           const ShardPlan* frozen_plan, RankState& state, WeightGatherer& gatherer);
  // With offload the masters and gradient shards are the host optimizer's (set once it exists).
  void set_offload(OffloadedOptimizer* offload) { offload_ = offload; }

  // Initialises the weights as LlamaModel::init_weights(seed) would (each rank its part).
  void init_weights(uint64_t seed);
  // DataParallelEngine's weight_range, set_weights, gather_weights, gather_gradients and
  // set_frozen_weights (engine.h says what each does).
  std::pair<int64_t, int64_t> weight_range(int group) const;
  void set_weights(int group, int64_t begin, int64_t count, const float* values);
  void gather_weights(int group, float* host);
  void gather_gradients(int group, float* host);
  void set_frozen_weights(int index, const float* values);

 private:
  int stage() const { return mesh_->zero_stage(); }
  int tp_size() const { return mesh_->shape().tp; }
  bool compute_replica() const { return state_->sizing().compute_replica; }
  bool sharded_masters() const { return stage() == 3 || compute_replica(); }
  bool shards_offloaded() const { return offload_ != nullptr && stage() == 3; }
  // The f32 master shard of group g (sharded masters on the device).
  Tensor master_shard(int group) const;
  // set_weights / gather_weights in this rank's own layout (trainable().layout()).
  void set_local_weights(int group, int64_t begin, int64_t count, const float* values);
  void gather_local_weights(int group, float* host);
  void gather_local_gradients(int group, float* host);
  // Stages 1-2 in mixed precision: writes elements [first, first + count) of group g (host
  // f32) into its compute-dtype replica.
  void write_replica(int group, int64_t first, int64_t count, const float* values);
  // shards_offloaded(): gathers group g's whole f32 group from every fsdp rank's host `shard`
  // (its master or gradient, elements [0, shard_length)) into `host`.
  void gather_host_shards(int group, const Tensor& shard, float* host);
  // Fills host with whole group g (full layout) from every tp rank's `gather_local` result
  // (its own layout's group); collective over tp, plain gather_local without tp.
  void gather_whole_group(int group, float* host,
                          const std::function<void(float*)>& gather_local);

  LlamaModel* model_ = nullptr;
  DeviceMesh* mesh_ = nullptr;
  const ShardPlan* plan_ = nullptr;
  const ShardPlan* frozen_plan_ = nullptr;  // LoRA only
  RankState* state_ = nullptr;
  WeightGatherer* gatherer_ = nullptr;
  OffloadedOptimizer* offload_ = nullptr;   // with offload only
};

}  // namespace anvil
