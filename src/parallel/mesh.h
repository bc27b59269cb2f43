// The device mesh: dp x fsdp x tp = world. World rank r sits at fsdp index r / dp and dp index
// r % dp (fsdp-major), so the ranks of one fsdp shard's replicas are neighbours and world rank
// order is the data order: data-parallel rank = world rank, and a rank-order sum over the
// world is the serial sum over the global batch's micro-batches (see engine.h).
// Axis resolution (0 = auto): both dp and fsdp auto -> zero_stage 0 replicates (dp = world),
// zero_stage >= 1 shards (fsdp = world); one of them set -> the other takes the rest.
// tp must be 1 for now. Each axis gets its own communicator, split once from the world.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace anvil {

// The [parallel] settings as the user gave them; 0 for dp or fsdp means "work it out".
struct ParallelSettings {
  int dp = 0;
  int fsdp = 0;
  int tp = 1;
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
// the settings cannot describe this world (bad stage, tp != 1, a product that does not match).
MeshShape resolve_mesh_shape(const ParallelSettings& settings, int world_size);

class DeviceMesh {
 public:
  // Resolves the shape and splits `world` into the dp and fsdp communicators (collective).
  DeviceMesh(Communicator& world, const ParallelSettings& settings);

  Communicator& world() const { return *world_; }
  // The ranks holding the same fsdp shard (replicas); size dp.
  Communicator& dp() const { return *dp_; }
  // The ranks that together hold one replica of the sharded state; size fsdp.
  Communicator& fsdp() const { return *fsdp_; }
  const MeshShape& shape() const { return shape_; }
  int zero_stage() const { return settings_.zero_stage; }
  bool offload() const { return settings_.offload; }
  // Returns this rank's data-parallel index (which micro-batches it reads) and their count.
  int data_rank() const { return world_->rank(); }
  int data_world() const { return world_->size(); }
  int dp_index() const { return dp_->rank(); }
  int fsdp_index() const { return fsdp_->rank(); }
  // Returns "world 4 = dp 2 x fsdp 2 x tp 1, ZeRO stage 3".
  std::string describe() const;

 private:
  Communicator* world_;
  ParallelSettings settings_;
  MeshShape shape_;
  std::unique_ptr<Communicator> dp_;
  std::unique_ptr<Communicator> fsdp_;
};

}  // namespace anvil
