// DataParallelEngine: data parallelism and ZeRO stages 0-3 applied to a single-device
// LlamaModel from outside, through its GroupHooks and flat per-group buffers. It trains
// model.trainable(): every weight, or only the LoRA adapters. A frozen LoRA base has no
// gradient and no optimizer state anywhere; under stage 3 it is sharded like trainable weights
// (in its own dtype, f32 or bf16) and gathered with the adapters of its group into the same
// slot before each use; under stages 0-2 every rank holds all of it.
//   stage 0  weights, gradients and AdamW state replicated; each group's gradient is
//            all-reduced as soon as its backward finishes, overlapping the rest of backward.
//   stage 1  AdamW moments sharded over fsdp; each rank steps its shard of every group and
//            the updated weights are all-gathered.
//   stage 2  gradients reduce-scattered too: a rank keeps only its shard; full gradients
//            exist only in a few group-sized slots while a group's backward runs.
//            Stages 1-2 in mixed precision (DeepSpeed's layout; not LoRA): the f32 master is
//            sharded like the moments, and the weights the model computes with are held once,
//            in the compute dtype (norms and the embedding in f32), laid out as a stage-3
//            slot per group; after the step each rank casts its updated shard and they are
//            all-gathered in the compute dtype. Casting is element-wise: still bitwise.
//   stage 3  weights sharded too: a group is all-gathered into a slot before each use in
//            forward and backward (in the compute dtype, norms in f32: slot_plans.h, weight_gatherer.h), the
//            next mesh.prefetch() groups of the pass are prefetched, and slots are reused
//            after; the model's views are re-pointed with bind_compute_weights (mixed
//            precision) or bind_weights/gradients. No full compute-dtype copy is held.
// Tensor parallelism: the model holds its tp rank's shards (ModelOptions::tp, from
// model_options(options, mesh)); every stage above runs on the data communicator (the dp x
// fsdp ranks of one tp index), so each tp rank shards, reduces and steps its own slice, and
// the tp ranks of a group read the same micro-batches. Replicated parameters (norms, one LoRA
// factor of each adapter) get bitwise identical gradients on every tp rank (the model's tp
// sums are ordered), so their copies stay identical; the gradient norm counts them once.
// Context parallelism: every cp rank of a group is given the same whole-sequence micro-batches
// and keeps its rows (model/context_parallel.h); data() spans the cp ranks, so token counts,
// losses and gradients are summed over them like over extra data ranks, and ZeRO state is
// replicated over them like over dp (dp() spans dp x cp). Exactness below then holds up to the
// order in which ring attention merges partial results (a few ulps, not bits).
// Exactness: the gradient of a step is defined as the serial sum g_0 + g_1 + ... + g_(n-1)
// over the global batch's n micro-batches, each computed into zeroed buffers, in global
// order j = m * world + r (micro-step m of data rank r). The engine reduces after every
// micro-step with ReduceOp::ordered_sum, and rank 0 adds the running sum into its own term
// first, so the result is that serial sum bit for bit at any world size and stage (one
// process included). The loss is summed in the same order and the gradient norm is exact
// (ExactSquareSum). Hence N processes reproduce one process with the same global batch.
// Fast reductions (mesh.reduce_mode() == ReduceMode::fast, as PyTorch DDP / FSDP2 reduce):
// stages 0-1 accumulate gradients locally and all-reduce each group once, in the last
// micro-step; stages 2-3 reduce-scatter each micro-step's gradient and add it into the shard.
// Both use ReduceOp::sum (the library's algorithm), in f32 or cast to mesh.reduce_dtype() and
// back, so a step is repeatable on a fixed mesh but not equal to one process's bit for bit;
// the loss sums and the gradient norm stay exact. Exact mode is what the paragraph above says.
// Offload (mesh.offload(), offloaded_optimizer.h): the AdamW moments and f32 masters of this
// rank's shard live in host memory and are stepped there (HostAdamW). Stages 0-2: the device
// keeps the weights it computes with and its gradients. Stage 3 (DeepSpeed's offload_optimizer
// with ZeRO-3): the device keeps only what the gathers read, its shard in the gather dtype (a
// bf16 model: bf16 plus its packed f32 norm parts), and each reduced gradient shard leaves
// the device on a copy stream as its reduction finishes, through a transient staging slot; with
// mesh.offload_params() (DeepSpeed's offload_param) that shard is host memory too, uploaded into
// its own place in a slot before each gather. Results are bitwise those without offload.
// The engine is composed of parts with one job each (docs/layers.md draws who calls whom):
//   RankState (rank_state.h)           what the rank holds: the sizing list of
//                                      plan_rank_buffers (rank_buffers.h), allocated once
//   WeightGatherer (weight_gatherer.h) stage-3 gathers, prefetch, reshard; replica publish
//   GradientReducer (gradient_reducer.h) exact and fast reductions of every stage
//   GradientNorm (gradient_norm.h)     loss sums, the exact gradient norm, one readback
//   AdamW / OffloadedOptimizer          the update, on the device or (offload) on the host
//   WeightIO (weight_io.h)             weight and gradient I/O for init and checkpoints, in
//                                      the whole model's coordinates
// The engine itself receives the model's hooks and runs the step and evaluation. Planning
// (what a rank would hold, the collectives of a step) is engine_plan.h, from the same list.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/device_trace.h"
#include "core/exact_square_sum.h"
#include "model/compute_weights.h"
#include "model/llama.h"
#include "optim/adamw.h"
#include "optim/host_adamw.h"
#include "parallel/gradient_norm.h"
#include "parallel/gradient_reducer.h"
#include "parallel/mesh.h"
#include "parallel/offloaded_optimizer.h"
#include "parallel/rank_buffers.h"
#include "parallel/rank_state.h"
#include "parallel/shard_plan.h"
#include "parallel/slot_plans.h"
#include "parallel/slot_pool.h"
#include "parallel/weight_gatherer.h"
#include "parallel/weight_io.h"

namespace anvil {

struct EngineOptions {
  AdamWHyperParams hyper;
  double grad_clip = 0.0;  // global-norm clipping threshold; <= 0 disables it
  int micro_batches = 1;   // micro-batches per step on each rank (buffers are sized for it)
};

struct StepReport {
  LossSum loss;          // over the whole global batch
  double grad_norm = 0;  // before clipping (of the unscaled gradients)
  double clip_scale = 1;
  // False when the loss or the gradient norm was not finite: the step then changed no weight
  // and no optimizer state (its step count included). Every rank sees the same value.
  bool applied = true;
};

class DataParallelEngine final : private GroupHooks {
 public:
  // Returns `options` with the buffers the engine provides itself switched off.
  static ModelOptions model_options(ModelOptions options, int zero_stage);
  // The same for `mesh`'s ZeRO stage, with the tensor-parallel split of this rank.
  static ModelOptions model_options(ModelOptions options, const DeviceMesh& mesh);

  // Takes over `model` (built with model_options(..., mesh.zero_stage())) and allocates the
  // sharded state; weights start at zero (init_weights or a checkpoint fills them).
  DataParallelEngine(LlamaModel& model, DeviceMesh& mesh, const EngineOptions& options);
  ~DataParallelEngine() override;
  DataParallelEngine(const DataParallelEngine&) = delete;
  DataParallelEngine& operator=(const DataParallelEngine&) = delete;

  // Initialises the weights as LlamaModel::init_weights(seed) would (each rank its part).
  void init_weights(uint64_t seed) { io_.init_weights(seed); }

  // Runs one optimizer step on this rank's micro-batches (micro-step order) at learning rate
  // `lr`; every rank passes the same number. Collective. The global loss and gradient norm are
  // checked before the update: a non-finite one skips the update (report.applied = false) on
  // every rank alike, so no NaN or Inf ever reaches the weights or the AdamW moments.
  // `loss_scale` (a power of two; fp16's dynamic loss scaling) multiplies the loss before the
  // backward pass and divides the gradients before the norm, the clipping and the update, so
  // the report and the update are those of the unscaled loss.
  StepReport train_step(std::span<const Batch> micro_batches, double lr, double loss_scale = 1.0);

  // Returns the loss over batches 0..count-1, batch i run by data rank i % world and the
  // sums added in batch order (so equal to a single process's). Collective.
  LossSum evaluate(int64_t count, const std::function<Batch(int64_t)>& batch_at);
  // Runs `body`, which may call only the model's forward passes (forward_logits,
  // forward_step), the same calls on every rank; under ZeRO-3 each pass gathers its weights
  // as evaluate()'s do. Benchmark scoring during training runs this way.
  void run_inference(const std::function<void()>& body);

  LlamaModel& model() const { return *model_; }
  DeviceMesh& mesh() const { return *mesh_; }
  const ShardPlan& plan() const { return plan_; }
  int zero_stage() const { return stage_; }
  int64_t optimizer_steps() const;
  void set_optimizer_steps(int64_t steps);
  // True when the AdamW state and f32 masters live in host memory (parallel.offload).
  bool offloaded() const { return offload_ != nullptr; }
  // True when stages 1-2 hold the weights in the compute dtype beside sharded f32 masters
  // (mixed precision without LoRA).
  bool compute_replica() const { return state_.sizing().compute_replica; }
  // True when, in addition, the gradient shards live in host memory and the device holds its
  // weight shard only in the gather dtype (stage 3 with offload).
  bool shards_offloaded() const { return offloaded() && stage_ == 3; }
  // True when that weight shard is in host memory too (parallel.offload_params).
  bool params_offloaded() const { return shards_offloaded() && mesh_->offload_params(); }

  // Weights in the whole model's coordinates: groups and element offsets of
  // model.full_trainable_layout() (the same as trainable().layout() without tensor
  // parallelism).
  // Returns the element range [begin, end) of group g's weights this rank holds: its fsdp
  // shard under stage 3, the whole group otherwise (and always under tensor parallelism,
  // where a rank holds scattered parts of each tensor).
  std::pair<int64_t, int64_t> weight_range(int group) const { return io_.weight_range(group); }
  // Copies values for elements [begin, begin + count) of group g into the part of them this
  // rank holds (elements this rank does not hold are skipped).
  void set_weights(int group, int64_t begin, int64_t count, const float* values) {
    io_.set_weights(group, begin, count, values);
  }
  // Copies group g's whole weights (full layout group size) to host memory; collective over
  // the fsdp axis under stage 3 and over the tp axis under tensor parallelism.
  void gather_weights(int group, float* host) { io_.gather_weights(group, host); }
  // Copies group g's reduced gradient of the last step (whole group, full layout) to host
  // memory, as the optimizer stepped it (before clipping); collective like gather_weights.
  void gather_gradients(int group, float* host) { io_.gather_gradients(group, host); }
  // Writes the whole tensor of frozen base parameter `index` (layout order of
  // model.full_layout()) into the part of it this rank holds, in the base's dtype (LoRA only).
  void set_frozen_weights(int index, const float* values) {
    io_.set_frozen_weights(index, values);
  }
  // Returns how the frozen base is cut (LoRA; an empty plan otherwise).
  const ShardPlan& frozen_plan() const { return frozen_plan_; }
  // Returns the tp group's size (1 without tensor parallelism).
  int tp_size() const { return mesh_->shape().tp; }
  // Returns the layout of trainable() on a tp rank of a mesh with `tp` ranks per tp group
  // (the layout optimizer state of a checkpoint written at that tp size is laid out in).
  std::shared_ptr<const ParameterLayout> trainable_layout_at_tp(int tp) const;
  // Returns AdamW's m (which = 0) or v (which = 1) for this rank's shard of group g:
  // elements [shard_begin, shard_begin + shard_length); undefined when the shard is empty.
  // It lives on optimizer_backend(): the host's when offloaded, the model's otherwise.
  Tensor moment(int group, int which) const;
  Backend& optimizer_backend() const;

  // Returns what this rank's backend holds now and has held at most, by category: every
  // allocation of the model, the engine, the optimizer (unless offloaded) and the
  // collectives' staging (and of anything else on the same backend), measured by the backend
  // (core/memory_counters.h).
  MemorySnapshot memory() const { return model_->backend().memory_snapshot(); }
  // Returns what the offloaded optimizer holds in host memory (masters, gradient copies,
  // moments), by category; all zero without offload.
  MemorySnapshot host_memory() const {
    return offloaded() ? offload_->host().backend().memory_snapshot() : MemorySnapshot{};
  }

 private:

  enum class Pass { idle, train, eval };

  void before_forward(int group) override;
  void after_forward(int group) override;
  void before_backward(int group) override;
  void after_backward(int group) override;

  // Traces: the model's work on one group, from the hook that hands the group over (its
  // gathers done) to the hook that takes it back, is one "compute" span: "forward layer 3",
  // "backward layer 3", "forward+backward head" (train) or "forward head" (eval).
  // The same span is recorded in device time too (backend/device_trace.h).
  struct GroupSpan {
    uint64_t session = 0;  // 0: none open
    int64_t begin_ns = 0;
    int group = -1;
    std::string name;
    std::unique_ptr<DeviceSpan> device;
  };
  void open_group_span(int group, bool forward);
  void close_group_span(int group);

  // Returns `batches` (whole sequences) cut to this rank's rows under context parallelism
  // (views into local_rows_, valid until the next call), else `batches` itself.
  std::span<const Batch> rows_of_this_rank(std::span<const Batch> batches);
  void allocate_state(int micro_batches);
  void build_optimizer();
  Tensor optimizer_weights(int group) const;
  Tensor optimizer_gradients(int group) const;
  Tensor reduced_gradient_slice(int group) const;
  void begin_pass(Pass pass);
  void end_pass();
  // Whether the f32 master is a shard (stage 3, and stages 1-2 in mixed precision).
  bool sharded_masters() const { return stage_ == 3 || compute_replica(); }
  void publish_weights();
  // Starts the fsdp all-gather that spreads group g's updated shard over its replica
  // (stages 1-2: with fsdp > 1, or in mixed precision); none otherwise. finish_publish waits
  // for `gathers` and prepares the gathered groups (stage 3: forgets the cached slots).
  std::vector<std::unique_ptr<CommHandle>> start_publish(int group);
  void finish_publish(std::vector<std::unique_ptr<CommHandle>>& gathers);
  void run_gather_only_pass();

  LlamaModel* model_;
  DeviceMesh* mesh_;
  EngineOptions options_;
  int stage_;
  int head_;
  bool tied_;
  ShardPlan plan_;
  bool lora_;
  ShardPlan frozen_plan_;        // LoRA: the frozen base's groups over the same mesh
  std::vector<std::vector<ParamSpan>> spans_;
  RankState state_;  // every buffer this rank holds beside the model (rank_state.h)
  WeightGatherer gatherer_;  // stage-3 gathers, prefetch and reshard (weight_gatherer.h)
  WeightIO io_;              // weights in the whole model's coordinates (weight_io.h)
  std::unique_ptr<AdamW> optimizer_;          // without offload
  std::unique_ptr<OffloadedOptimizer> offload_;  // with offload (offloaded_optimizer.h)
  GradientNorm norm_;  // the loss sums and the gradient norm (gradient_norm.h)
  Pass pass_ = Pass::idle;
  bool inference_ = false;  // inside run_inference: each forward pass is an eval pass
  int micro_step_ = 0;
  std::vector<CpLocalBatch> local_rows_;  // context parallelism: this rank's rows of a step
  std::vector<Batch> local_batches_;
  GroupSpan group_span_;
  // Declared last: destroyed first (its copy stream finishes its queued copies into the
  // host optimizer's memory and the state's staging slots before they go).
  GradientReducer reducer_;  // gradient reductions of every stage (gradient_reducer.h)
};

}  // namespace anvil
