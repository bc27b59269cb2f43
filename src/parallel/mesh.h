// The device mesh: dp x fsdp x tp = world. tp is the innermost axis (the ranks of one tensor-
// parallel group are neighbours, on the fastest links): world rank r has tp index r % tp and
// data rank r / tp, and data rank q sits at fsdp index q / dp and dp index q % dp
// (fsdp-major), so one fsdp shard's replicas are neighbours too. Data rank order is the data
// order: the tp ranks of a group read the same micro-batches, and a rank-order sum over the
// data ranks is the serial sum over the global batch's micro-batches (see engine.h).
// Axis resolution (0 = auto): both dp and fsdp auto -> zero_stage 0 replicates (dp = world /
// tp), zero_stage >= 1 shards (fsdp = world / tp); one of them set -> the other takes the
// rest. Each axis gets its own communicator, split once from the world, plus the data
// communicator (dp x fsdp ranks with one tp index) that gradients and losses are summed over.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/counting_communicator.h"
#include "model/tensor_parallel.h"

namespace anvil {

// The [parallel] settings as the user gave them; 0 for dp or fsdp means "work it out".
struct ParallelSettings {
  int dp = 0;
  int fsdp = 0;
  int tp = 1;
  bool sequence_parallel = false;  // split the residual stream over the tp ranks (tp > 1)
  int zero_stage = 0;  // 0 replicate, 1 shard optimizer state, 2 + gradients, 3 + weights
  bool offload = false;
};

// Resolved axis sizes; dp * fsdp * tp equals the world size.
struct MeshShape {
  int dp = 1;
  int fsdp = 1;
  int tp = 1;
};

// Resolves the auto axes against `world_size`; throws "[parallel] ..." naming the numbers when
// the settings cannot describe this world (bad stage, a product that does not match).
MeshShape resolve_mesh_shape(const ParallelSettings& settings, int world_size);

// Payload bytes this rank has handed to each axis's collectives (CountingCommunicator); the
// data axis carries the gradient reductions of stages 0-3 and the step's loss and norm
// exchanges, dp and fsdp the hybrid-sharding gathers, tp the tensor-parallel sums.
struct MeshTraffic {
  int64_t tp = 0;
  int64_t data = 0;
  int64_t dp = 0;
  int64_t fsdp = 0;
};

class DeviceMesh {
 public:
  // Resolves the shape and splits `world` into the tp, data, dp and fsdp communicators
  // (collective).
  DeviceMesh(Communicator& world, const ParallelSettings& settings);

  Communicator& world() const { return *world_; }
  // The ranks holding the same fsdp shard (replicas); size dp.
  Communicator& dp() const { return *dp_; }
  // The ranks that together hold one replica of the sharded state; size fsdp.
  Communicator& fsdp() const { return *fsdp_; }
  // The ranks of one tensor-parallel group (same data rank); size tp.
  Communicator& tp() const { return *tp_; }
  // The ranks with this rank's tp index, in data rank order; size dp x fsdp.
  Communicator& data() const { return *data_; }
  const MeshShape& shape() const { return shape_; }
  int zero_stage() const { return settings_.zero_stage; }
  bool offload() const { return settings_.offload; }
  // Returns this rank's data-parallel index (which micro-batches it reads) and their count.
  int data_rank() const { return data_->rank(); }
  int data_world() const { return data_->size(); }
  int tp_index() const { return tp_->rank(); }
  // Returns what a model built for this rank needs (ModelOptions::tp): the tp size, this
  // rank's tp index and the tp collectives (ordered sums over tp(), so every tp rank computes
  // bitwise the same replicated values).
  TensorParallel tensor_parallel() const;
  int dp_index() const { return dp_->rank(); }
  int fsdp_index() const { return fsdp_->rank(); }
  // Returns the bytes counted so far on each axis.
  MeshTraffic traffic() const;
  // Returns "world 4 = dp 2 x fsdp 2 x tp 1, ZeRO stage 3".
  std::string describe() const;

 private:
  Communicator* world_;
  ParallelSettings settings_;
  MeshShape shape_;
  std::unique_ptr<CountingCommunicator> tp_;
  std::unique_ptr<TensorParallelOps> tp_ops_;
  std::unique_ptr<CountingCommunicator> data_;
  std::unique_ptr<CountingCommunicator> dp_;
  std::unique_ptr<CountingCommunicator> fsdp_;
};

}  // namespace anvil
