// The device mesh: dp x fsdp x tp x cp = world. Rank placement, innermost axis first: tp (the
// ranks of one tensor-parallel group are neighbours, on the fastest links), cp, then dp and
// fsdp: world rank r has tp index r % tp, cp index (r / tp) % cp and sample rank
// q = r / (tp * cp), which sits at fsdp index q / dp and dp index q % dp (fsdp-major), so one
// fsdp shard's replicas are neighbours too. The sample rank picks the micro-batches: the tp
// and cp ranks of a group read the same samples (cp ranks then keep their chunks of each
// sequence), and sample rank order is the data order.
// The data communicator (the dp x fsdp x cp ranks with one tp index, rank = q * cp + cp index)
// is what gradients, losses and token counts are summed over: the cp ranks of a group each hold
// part of every sequence, so for reductions they are extra data ranks. ZeRO (stages 1-3)
// shards over fsdp x cp (torchtitan's dp_shard_cp): the cp ranks hold different shards, and
// only the dp ranks hold replicas. Which data ranks share a shard is a matter of storage alone
// (every rank gathers whole weights and reduces over all data ranks), so the engine's axes cut
// the data ranks in order: shard index = data rank / dp on fsdp(), replica index = data rank %
// dp on dp(); stage 0 has one shard, replicated on all data ranks.
// Axis resolution (0 = auto): both dp and fsdp auto -> zero_stage 0 replicates (dp = world /
// (tp cp)), zero_stage >= 1 shards (fsdp = world / (tp cp)); one of them set -> the other takes
// the rest. Each axis gets its own communicator, split once from the world.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/counting_communicator.h"
#include "model/context_parallel.h"
#include "model/tensor_parallel.h"
#include "parallel/parallel_settings.h"

namespace anvil {

// Resolved axis sizes; dp * fsdp * tp * cp equals the world size.
struct MeshShape {
  int dp = 1;
  int fsdp = 1;
  int tp = 1;
  int cp = 1;
};

// Resolves the auto axes against `world_size`: validates the settings
// (validate_parallel_settings), then throws "[parallel] ..." naming the numbers when they
// cannot describe this world (a product that does not match, an axis that does not divide).
MeshShape resolve_mesh_shape(const ParallelSettings& settings, int world_size);

// Payload bytes this rank has handed to each axis's collectives (CountingCommunicator); the
// data axis carries the gradient reductions of stages 0-3 and the step's loss and norm
// exchanges, dp and fsdp the hybrid-sharding gathers, tp the tensor-parallel sums, cp the
// ring attention's key/value (and their gradients') exchanges.
struct MeshTraffic {
  int64_t tp = 0;
  int64_t cp = 0;
  int64_t data = 0;
  int64_t dp = 0;
  int64_t fsdp = 0;
};

class DeviceMesh {
 public:
  // Resolves the shape and splits `world` into the tp, cp, data, dp and fsdp communicators
  // (collective).
  DeviceMesh(Communicator& world, const ParallelSettings& settings);

  // The world the mesh was split from (counted and traced as axis "world"; its bytes are not
  // part of traffic()).
  Communicator& world() const { return *world_; }
  // The ranks holding the same shard (replicas); size dp (data world under stage 0).
  Communicator& dp() const { return *dp_; }
  // The ranks that together hold one replica of the sharded state; size shard_count().
  Communicator& fsdp() const { return *fsdp_; }
  // Returns how many shards ZeRO cuts the state into: fsdp x cp under stages 1-3, else 1.
  int shard_count() const { return fsdp_->size(); }
  // The ranks of one tensor-parallel group (same data rank); size tp.
  Communicator& tp() const { return *tp_; }
  // The ranks of one context-parallel group (same samples, same tp index); size cp.
  Communicator& cp() const { return *cp_; }
  // The ranks with this rank's tp index, in data rank order; size dp x fsdp x cp.
  Communicator& data() const { return *data_; }
  const MeshShape& shape() const { return shape_; }
  const ParallelSettings& settings() const { return settings_; }
  int zero_stage() const { return static_cast<int>(settings_.zero_stage); }
  bool offload() const { return settings_.offload; }
  bool offload_params() const { return settings_.offload_params; }
  int prefetch() const { return static_cast<int>(settings_.prefetch); }
  bool reshard_after_forward() const { return settings_.reshard_after_forward; }
  ReduceMode reduce_mode() const { return settings_.reduce_mode(); }
  DType reduce_dtype() const { return settings_.reduce_type(); }
  // Returns this rank's index in data() and data()'s size (the engine's reduction and
  // sharding ranks; they equal sample_rank()/sample_world() when cp is 1).
  int data_rank() const { return data_->rank(); }
  int data_world() const { return data_->size(); }
  // Returns which micro-batches this rank reads (the cp ranks of a group read the same ones)
  // and the number of such sample ranks.
  int sample_rank() const { return data_->rank() / shape_.cp; }
  int sample_world() const { return data_->size() / shape_.cp; }
  int cp_index() const { return cp_->rank(); }
  // Returns what a model built for this rank needs (ModelOptions::cp): the cp size, this
  // rank's cp index and the ring exchange over cp().
  ContextParallel context_parallel() const;
  int tp_index() const { return tp_->rank(); }
  // Returns what a model built for this rank needs (ModelOptions::tp): the tp size, this
  // rank's tp index and the tp collectives (ordered sums over tp(), so every tp rank computes
  // bitwise the same replicated values).
  TensorParallel tensor_parallel() const;
  // Returns this rank's replica index (its rank in dp()) and shard index (in fsdp()).
  int dp_index() const { return dp_->rank(); }
  int fsdp_index() const { return fsdp_->rank(); }
  // Returns the bytes counted so far on each axis.
  MeshTraffic traffic() const;
  // Sets the staging allocator (Communicator::set_staging_allocator) of every axis
  // communicator; not of world(), which wraps a communicator the mesh does not own.
  void set_staging_allocator(Allocator* allocator);
  // Returns "world 4 = dp 2 x fsdp 2 x tp 1, ZeRO stage 3" (" x cp 2" after tp when cp > 1,
  // " (sharded over fsdp x cp = 4)" after the stage when ZeRO shards over cp too, and
  // ", fast f32 reduce" or ", fast bf16 reduce" at the end in fast mode).
  std::string describe() const;

 private:
  std::unique_ptr<CountingCommunicator> world_;
  ParallelSettings settings_;
  MeshShape shape_;
  std::unique_ptr<CountingCommunicator> tp_;
  std::unique_ptr<TensorParallelOps> tp_ops_;
  std::unique_ptr<CountingCommunicator> cp_;
  std::unique_ptr<ContextParallelOps> cp_ops_;
  std::unique_ptr<CountingCommunicator> data_;
  std::unique_ptr<CountingCommunicator> dp_;
  std::unique_ptr<CountingCommunicator> fsdp_;
};

}  // namespace anvil
