// OffloadedOptimizer: the engine's stepping part with parallel.offload. The AdamW moments and
// the f32 master of this rank's shard of every group live in host memory (HostAdamW) and are
// stepped there; the device keeps what it computes with (stages 0-2) or what the gathers read
// (stage 3: the shard in the gather dtype, rewritten from the master after each update).
// Everything that exists only with offload lives here: the host optimizer, which masters or
// device shards are stale, and the host entries of the rank's state (allocated with it).
// The design and the order of a step are in offloaded_optimizer.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "optim/adamw.h"
#include "optim/host_adamw.h"
#include "parallel/rank_state.h"
#include "parallel/shard_plan.h"

namespace anvil {

// What the offloaded optimizer steps: `plan`'s shards, with the decay spans of each group.
struct OffloadedGroups {
  Backend* device = nullptr;  // the model's backend
  const ShardPlan* plan = nullptr;
  RankState* state = nullptr;  // its optimizer indices are set here; host entries allocated
  const std::vector<std::vector<ParamSpan>>* spans = nullptr;  // per group, layout offsets
  // The device's f32 weights and reduced gradients of group g's shard (stages 0-2).
  std::function<Tensor(int)> device_weights;
  std::function<Tensor(int)> device_gradients;
  bool shards_offloaded = false;  // stage 3: the gradient shards and masters are host-only
  bool params_offloaded = false;  // ... and the weight shard the gathers read (offload_params)
};

class OffloadedOptimizer {
 public:
  // All of `groups`' pointers must outlive the optimizer.
  OffloadedOptimizer(const OffloadedGroups& groups, const AdamWHyperParams& hyper);
  ~OffloadedOptimizer();
  OffloadedOptimizer(const OffloadedOptimizer&) = delete;
  OffloadedOptimizer& operator=(const OffloadedOptimizer&) = delete;

  HostAdamW& host() const { return *host_; }
  // Returns the f32 master or gradient of group g's shard in host memory, elements
  // [0, shard_length); null tensors when g has none on this rank.
  Tensor master(int group) const;
  Tensor gradient(int group) const;
  // Copies each group's reduced gradient shard (and, when they changed on the device since the
  // last step, the weights) to the host; nothing with the shards offloaded, whose gradients
  // arrived as their reductions finished.
  void copy_gradients_to_host();
  // Steps every group on the host and brings the updated weights back, calling `updated(g)`
  // for every group in order as its update has arrived on the device.
  void step(double lr, double grad_scale, const std::function<void(int)>& updated);
  // Marks the device's weights as newer than the masters (stages 0-2: the next step re-reads
  // them).
  void mark_masters_stale() { masters_stale_ = true; }
  // Shards offloaded: writes elements [first, first + count) of group g's master (shard
  // coordinates); the device shard is rewritten from it before its next gather.
  void write_master(int group, int64_t first, int64_t count, const float* values);
  // Shards offloaded: rewrites group g's device shard from its master when the master is newer
  // (before each gather) or now (after an update): cast to the gather dtype, packed f32 parts.
  void upload_stale_shard(int group);
  void upload_shard(int group);

 private:
  Backend* device_;
  const ShardPlan* plan_;
  RankState* state_;
  std::function<Tensor(int)> device_weights_;
  std::function<Tensor(int)> device_gradients_;
  bool shards_offloaded_;
  bool params_offloaded_;
  bool masters_stale_;             // the device's weights were written since the last copy
  std::vector<bool> shard_stale_;  // shards offloaded: the host master is newer
  std::unique_ptr<HostAdamW> host_;
};

}  // namespace anvil
