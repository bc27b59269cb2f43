// GradientReducer: the engine's reducing part. After each group's backward it reduces the
// group's gradient over the data ranks, as the stage and the reduce mode say:
//   stages 0-1  an all-reduce of the model's gradient buffer (exact: every micro-step, with
//               data rank 0 keeping the running sum; fast: once, in the last micro-step);
//   stages 2-3  a reduce-scatter out of a gradient slot into this rank's shard (exact: data
//               rank 0 first adds the gathered running sum of the earlier micro-steps; fast:
//               each micro-step's slice is added into the shard), then with dp > 1 the gather
//               of the world slices into the fsdp shard.
// Exact reductions are ordered sums (bitwise one process); fast ones the library's sums, in
// f32 or cast to the reduce dtype and back. With the shards offloaded (stage 3 with offload)
// a reduced shard lands in a staging slot and leaves for the host optimizer's gradient on a
// copy stream while backward goes on. It allocates nothing: slots, shards and staging are the
// rank's (RankState). Chained steps of a reduction start in FIFO order, so every rank issues
// the same collectives in the same order.
#pragma once

#include <array>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/llama.h"
#include "parallel/mesh.h"
#include "parallel/rank_state.h"
#include "parallel/shard_plan.h"

namespace anvil {

class GradientReducer {
 public:
  GradientReducer() = default;
  // Reduces `plan`'s groups of `model` over `mesh` into `state`'s shards, for steps of
  // `micro_batches` micro-batches; all must outlive the reducer.
  GradientReducer(LlamaModel& model, DeviceMesh& mesh, const ShardPlan& plan, RankState& state,
                  int micro_batches);
  ~GradientReducer();
  GradientReducer(GradientReducer&&) = default;
  GradientReducer& operator=(GradientReducer&&) = default;

  // Sets what every poll runs first (the weight gathers' progress, so that a rank waiting on
  // a reduction keeps its gathers moving too).
  void set_progress(std::function<void()> progress) { progress_ = std::move(progress); }
  // Sets where the host optimizer keeps group g's gradient shard (offload).
  void set_host_gradient(std::function<Tensor(int)> host_gradient) {
    host_gradient_ = std::move(host_gradient);
  }

  // Starts micro-step `m` of a step.
  void begin_micro_step(int m) { micro_step_ = m; }
  // Stages 2-3: binds a zeroed gradient slot to group g's gradients; starts the gather of the
  // running sum that rank 0 adds before g's reduction (exact, after micro-step 0).
  void bind_slot(int group);
  void start_running_sum_gather(int group);
  // Called when group g's gradient is complete: starts its reduction.
  void reduce(int group);
  // Advances reductions without blocking; with `wait_for_one`, first waits for the oldest
  // reduce-scatter (which frees its slot).
  void poll(bool wait_for_one);
  // Completes every reduction of the micro-step; stages 0-1 exact (not `last`): keeps the
  // running sum and zeroes the gradients for the next micro-step.
  void finish_micro_step(bool last);

 private:
  // Where a gradient reduction's values go: the collective reduces `sent` into `received`
  // (the same tensor for an all-reduce); once it completes, land_reduction brings `received`
  // into the f32 `result`: cast back from the reduce dtype and, with `accumulate` (a fast
  // micro-step after the first), added to what earlier micro-steps left there, by way of the
  // f32 `partial`. Exact reductions receive straight into their result.
  struct ReductionRoute {
    Tensor sent;
    Tensor received;
    Tensor result;
    Tensor partial;
    bool accumulate = false;
  };
  // A gradient all-reduce in flight (stages 0-1).
  struct PendingAllReduce {
    std::unique_ptr<CommHandle> handle;
    ReductionRoute route;
  };
  // A gradient reduction in flight (stages 2-3): the world reduce-scatter out of a slot,
  // then, with dp > 1, the gather of the world slices into the fsdp shard.
  struct PendingReduction {
    int group = -1;
    int slot = -1;
    int staging = -1;  // shards_offloaded_: the staging slot the shard is reduced into
    ReductionRoute route;
    std::unique_ptr<CommHandle> scatter;
    std::unique_ptr<CommHandle> assemble;
  };
  size_t pool_of(int group) const;
  // Returns the op and the route of group g's reduction this micro-step: the all-reduce of
  // its gradient `grad` (stages 0-1) or the reduce-scatter of `p` out of its gradient slot's
  // `full` gradient.
  ReduceOp reduce_op() const { return fast_ ? ReduceOp::sum : ReduceOp::ordered_sum; }
  ReductionRoute all_reduce_route(int group, const Tensor& grad);
  ReductionRoute scatter_route(const PendingReduction& p, const Tensor& full);
  // shards_offloaded_: writes this rank's slice of group g's host gradient into `slice`.
  void upload_host_gradient_slice(int group, const Tensor& slice);
  void land_reduction(const ReductionRoute& route);
  // Returns group g's reduced shard on the device: its grad_shard, or (shards_offloaded_)
  // the staging slot of its pending reduction.
  Tensor reduced_shard(const PendingReduction& p) const;
  // Called when a reduction has fully arrived: with shards_offloaded_, queues the shard's
  // copy to the host optimizer's gradient on the offload stream; its staging slot is freed
  // when that copy has completed (release_downloaded_staging).
  void finish_reduction(const PendingReduction& p);
  // shards_offloaded_: frees the staging slots whose copy to the host has completed (with
  // `wait`, first waits for every copy queued so far); returns how many it freed.
  int release_downloaded_staging(bool wait);
  // shards_offloaded_: returns a free staging slot for group g, finishing the oldest
  // reductions and copies until one is free.
  int take_shard_staging(int group);
  bool scatter_pending() const;

  LlamaModel* model_ = nullptr;
  DeviceMesh* mesh_ = nullptr;
  const ShardPlan* plan_ = nullptr;
  RankState* state_ = nullptr;
  int stage_ = 0;
  int micro_batches_ = 1;
  bool fast_ = false;                // mesh.reduce_mode() == ReduceMode::fast
  DType reduce_dtype_ = DType::f32;  // reduction_dtype(): what the gradients travel in
  bool shards_offloaded_ = false;    // stage 3 with offload
  std::function<void()> progress_;
  std::function<Tensor(int)> host_gradient_;
  int micro_step_ = 0;
  std::vector<PendingAllReduce> all_reduces_;  // stages 0-1
  std::deque<PendingReduction> reductions_;    // stages 2-3
  std::vector<int> slot_of_;                   // group -> gradient slot, or -1
  std::unique_ptr<CommHandle> running_sum_gather_;
  // Offloaded shards: the copy stream reduced gradient shards leave the device on while
  // backward goes on, and per staging pool and slot the event of the copy out of it (null when
  // none is in flight). Declared last: destroyed first, after its queued copies have run.
  std::unique_ptr<Stream> offload_stream_;
  std::array<std::vector<std::unique_ptr<Event>>, 2> staging_downloads_;
};

}  // namespace anvil
