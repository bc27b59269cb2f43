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
//            forward and backward (in the compute dtype, norms in f32: engine_slots.cpp), the
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
// Offload (mesh.offload(), engine_offload.cpp): the AdamW moments and f32 masters of this
// rank's shard live in host memory and are stepped there (HostAdamW). Stages 0-2: the device
// keeps the weights it computes with and its gradients. Stage 3 (DeepSpeed's offload_optimizer
// with ZeRO-3): the device keeps only what the gathers read, its shard in the gather dtype (a
// bf16 model: bf16 plus its packed f32 norm parts), and each reduced gradient shard leaves
// the device on a copy stream as its reduction finishes, through a transient staging slot; with
// mesh.offload_params() (DeepSpeed's offload_param) that shard is host memory too, uploaded into
// its own place in a slot before each gather. Results are bitwise those without offload.
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
#include "parallel/mesh.h"
#include "parallel/shard_plan.h"
#include "parallel/slot_pool.h"

namespace anvil {

struct EngineOptions {
  AdamWHyperParams hyper;
  double grad_clip = 0.0;  // global-norm clipping threshold; <= 0 disables it
  int micro_batches = 1;   // micro-batches per step on each rank (buffers are sized for it)
};

// One kind of collective a training step runs (DataParallelEngine::planned_collectives).
struct PlannedCollective {
  enum class Kind { all_reduce, all_gather, reduce_scatter, exchange };  // exchange: send+recv
  const char* axis = "";  // the mesh axis, as MeshTraffic and the traces name it
  const char* what = "";  // "gradient reduce-scatter", ...
  Kind kind = Kind::all_reduce;
  int ranks = 1;          // the axis's group size
  int64_t payload_bytes = 0;  // per step, counted as CountingCommunicator counts them
  bool overlapped = true;     // issued asynchronously while compute goes on
  bool estimate = false;      // the model's tp/cp collectives: estimated, not exact
};

struct StepReport {
  LossSum loss;          // over the whole global batch
  double grad_norm = 0;  // before clipping (of the unscaled gradients)
  double clip_scale = 1;
  // False when the loss or the gradient norm was not finite: the step then changed no weight
  // and no optimizer state (its step count included). Every rank sees the same value.
  bool applied = true;
};

// The bytes a rank's buffers would hold, by kind, as `anvil plan` predicts them from the
// engine's own sizing functions (DataParallelEngine::planned_memory). What a run holds is
// measured by the backend's counters (memory()).
struct PlannedMemory {
  int64_t frozen = 0;        // the frozen LoRA base (its shards under stage 3)
  int64_t weights = 0;       // f32 trainable weights (their shards under stage 3)
  int64_t gradients = 0;
  int64_t optimizer = 0;     // AdamW m and v
  int64_t comm_buffers = 0;  // gather / reduce slots (stages 2-3), fast reduction scratch
  int64_t activations = 0;   // the model's activation arena
  int64_t workspace = 0;     // compute-dtype weight copies (mixed precision)
  // Not held at setup: the receive buffers of the ordered sums while they run (communication),
  // two of this rank's slice per sum (and a copy of its own chunk in an all-reduce). Stages
  // 0-1 all-reduce every group's gradient and hold them until the micro-step ends; stages 2-3
  // have as many reduce-scatters in flight as the gradient slots allow: one per layer slot,
  // plus the head's (and with tied embeddings the table's) at their own sizes (measured on the
  // tiny preset: up to exactly that, depending on timing). None with one data rank, nor for
  // fast f32 reductions (the library's sums); fast bf16 ones stage bf16 copies and f32 totals.
  int64_t collective_staging = 0;
  // Offload (parallel.offload): what the host optimizer holds in host memory, by category:
  // AdamW moments, f32 masters and gradient copies of the shard (and, stage 3 with a bf16
  // model, the buffer a master shard is cast in before it goes up). The categories above are
  // the device's alone.
  MemoryByCategory host{};
  int64_t total() const {
    return frozen + weights + gradients + optimizer + comm_buffers + activations + workspace;
  }
  // Returns the same bytes under the categories the backends measure.
  MemoryByCategory by_category() const {
    return {frozen, weights, gradients, optimizer, activations, comm_buffers, workspace};
  }
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
  void init_weights(uint64_t seed);

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
  bool offloaded() const { return host_optimizer_ != nullptr; }
  // True when stages 1-2 hold the weights in the compute dtype beside sharded f32 masters
  // (mixed precision without LoRA).
  bool compute_replica() const { return compute_replica_; }
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
  std::pair<int64_t, int64_t> weight_range(int group) const;
  // Copies values for elements [begin, begin + count) of group g into the part of them this
  // rank holds (elements this rank does not hold are skipped).
  void set_weights(int group, int64_t begin, int64_t count, const float* values);
  // Copies group g's whole weights (full layout group size) to host memory; collective over
  // the fsdp axis under stage 3 and over the tp axis under tensor parallelism.
  void gather_weights(int group, float* host);
  // Copies group g's reduced gradient of the last step (whole group, full layout) to host
  // memory, as the optimizer stepped it (before clipping); collective like gather_weights.
  void gather_gradients(int group, float* host);
  // Writes the whole tensor of frozen base parameter `index` (layout order of
  // model.full_layout()) into the part of it this rank holds, in the base's dtype (LoRA only).
  void set_frozen_weights(int index, const float* values);
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
  MemorySnapshot host_memory() const;

  // The gradient norm's digit counters on the device (none with offload, where the norm reads
  // the host optimizer's gradient copies).
  static constexpr int64_t kNormCounterBytes = kExactCounterCount * sizeof(uint64_t);
  // Returns the bytes of the step's results on the device (workspace), which the host reads
  // back once a step: a double loss sum per micro-batch, then the norm's digit counters.
  static int64_t step_result_bytes(int micro_batches, bool offload);

  // Planning (engine_plan.cpp): what a run would hold and send, from the shard plans and the
  // model's planned_memory alone, allocating nothing. `options` are the run's model options
  // before model_options(); `parallel` and `world` what the DeviceMesh is built from;
  // `micro_batches` per step. Returns the memory() data rank `data_rank` would report (rank
  // 0 holds the most).
  static PlannedMemory planned_memory(const LlamaConfig& config, const ModelOptions& options,
                                     const ParallelSettings& parallel, int world,
                                     int micro_batches, int data_rank = 0);
  // Returns the collectives one optimizer step runs on data rank 0, by axis and kind, with
  // the payload bytes the mesh's counting communicators would count (MeshTraffic);
  // `micro_batch_rows` is one micro-batch's rows on a rank (batch x seq_len / cp).
  static std::vector<PlannedCollective> planned_collectives(const LlamaConfig& config,
                                                            const ModelOptions& options,
                                                            const ParallelSettings& parallel,
                                                            int world, int micro_batches,
                                                            int64_t micro_batch_rows);

 private:

 public:
  // Where stage 3 puts one group in a weight slot (byte offsets into the slot). A group
  // travels either whole in f32 (f32 models; the embedding table, a lookup; LoRA) or, in a
  // mixed-precision model, whole in the compute dtype plus its f32 parts (norms, as the model
  // reads them: ComputeWeights::parts) packed: each fsdp rank contributes the f32 parts inside
  // its shard, padded to `packed` elements, and the receiver unpacks them in parts order.
  struct SlotLayout {
    bool compute = false;      // gathered in the compute dtype (+ packed f32 parts)
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
  static WeightSlotPlan plan_weight_slots(const LlamaConfig& shard_config,
                                          const ParameterLayout& layout, const ShardPlan& plan,
                                          const ShardPlan* frozen_plan, DType frozen_dtype,
                                          DType gather_dtype, int prefetch,
                                          bool reshard_after_forward);
  // Returns the kind of `group` (0: a layer, 1: the embedding or the head).
  static int slot_kind(const LlamaConfig& config, int group);
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
  static GradientSlotPlan plan_gradient_slots(const LlamaConfig& config, const ShardPlan& plan);
  // Assigns each group with a slot of `sizes[g]` (0: none) to a pool: pool 0 for the layers
  // and each embedding or head group no larger than the largest layer, pool 1 for the rest and
  // a tied embedding; sets the slots pool 1 needs. Returns the largest size in each pool.
  static std::array<int64_t, 2> assign_pools(const LlamaConfig& config,
                                             const std::vector<int64_t>& sizes,
                                             std::vector<int>& pool, int& outer_slots);
  // Stage 3 with offload: the staging slots a reduced gradient shard waits in for its copy to
  // the host, as many per pool as the gradient slots (each sized for the pool's largest shard).
  static GradientSlotPlan plan_shard_staging(const LlamaConfig& config, const ShardPlan& plan);
  // Stage 3 with offload: the bytes of a group's device shard, what its gathers read: the
  // shard in the compute dtype followed by its packed f32 parts (layout.compute), else in f32.
  static size_t offloaded_shard_bytes(const SlotLayout& layout, const GroupShard& shard,
                                      DType gather_dtype);
  // The byte offset of the packed f32 parts in such a shard.
  static size_t offloaded_packed_offset(const GroupShard& shard, DType gather_dtype);
  // Returns the dtype gradients travel in: the reduce dtype `dtype` in fast mode with several
  // data ranks, else f32 (exact sums are f32; one rank reduces nothing, so rounds nothing).
  static DType reduction_dtype(ReduceMode mode, DType dtype, int data_world);
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
  static ScatterScratch plan_scatter_scratch(int64_t elements, int data_world, DType dtype,
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
  static std::vector<PackedPiece> packed_pieces(const ComputeParts& parts, int64_t shard, int f);

 private:
  // Returns the bytes one step's stage-3 weight gathers move, playing the passes of
  // `micro_batches` micro-batches through the slot choices of acquire/release/prefetch.
  static int64_t stage3_gather_bytes(const LlamaConfig& config, int micro_batches,
                                     const WeightSlotPlan& slots, int prefetch);
  // Returns the order in which a train (or eval) pass reads the groups' weights under stage 3.
  static std::vector<int> stage3_weight_uses(const LlamaConfig& config, bool train);

  struct GroupStorage {
    Buffer replica;       // stages 1-2: the full (padded) weights, bound to the model (in
                          // mixed precision: the compute-dtype group, as a weight slot holds it)
    Buffer weight_shard;  // sharded_masters(): this rank's fsdp shard of the weights (f32;
                          // stage 3 offloaded: offloaded_shard_bytes, refreshed from the host
                          // master)
    Buffer grad_shard;    // stages 2-3: this rank's fsdp shard of the reduced gradient (not
                          // on the device when shards_offloaded())
    Buffer grad_sum;      // stages 0-1, world rank 0, several micro-batches: running sum
    Buffer reduce_cast;   // stages 0-1, fast bf16 reduction: the gradient cast to bf16
    int optimizer_index = -1;  // this group's index in the AdamW groups; -1 when empty
  };
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
    int staging = -1;  // shards_offloaded(): the staging slot the shard is reduced into
    ReductionRoute route;
    std::unique_ptr<CommHandle> scatter;
    std::unique_ptr<CommHandle> assemble;
  };
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

  // Elements [begin, begin + length) of a group's buffer.
  struct ElementRange {
    int64_t begin = 0;
    int64_t length = 0;
  };

  // Returns `batches` (whole sequences) cut to this rank's rows under context parallelism
  // (views into local_rows_, valid until the next call), else `batches` itself.
  std::span<const Batch> rows_of_this_rank(std::span<const Batch> batches);
  void allocate_state(int micro_batches);
  // set_weights / gather_weights in this rank's own layout (trainable().layout()).
  void set_local_weights(int group, int64_t begin, int64_t count, const float* values);
  void gather_local_weights(int group, float* host);
  void gather_local_gradients(int group, float* host);
  // shards_offloaded(): gathers group g's whole f32 group from every fsdp rank's host `shard`
  // (its master or gradient, elements [0, shard_length)) into `host`.
  void gather_host_shards(int group, const Tensor& shard, float* host);
  // Fills host with whole group g (full layout) from every tp rank's `gather_local` result
  // (its own layout's group); collective over tp, plain gather_local without tp.
  void gather_whole_group(int group, float* host, const std::function<void(float*)>& gather_local);
  // Returns, per group, the element ranges whose squares this rank adds to the gradient norm:
  // all of them, except replicated parameters on tp ranks other than 0.
  std::vector<std::vector<ElementRange>> norm_ranges() const;
  void build_optimizer();
  Tensor model_weights(int group) const;
  Tensor frozen_shard(int group) const;
  // Returns the frozen part of weight slot `slot` for `group` (stage 3, LoRA).
  Tensor frozen_slot_view(int slot, int group) const;
  Tensor optimizer_weights(int group) const;
  Tensor optimizer_gradients(int group) const;
  Tensor reduced_gradient_slice(int group) const;
  void begin_pass(Pass pass);
  void end_pass();
  // Stage 3: makes group g's gathered weights available to the model, prefetching the next
  // mesh().prefetch() groups of the pass.
  void acquire_weights(int group);
  void release_weights(int group);
  // Starts the gathers of group g's trainable weights and (with_frozen, LoRA) frozen base.
  void start_weight_gather(int group, int slot, bool with_frozen = true);
  // Starts the gathers of group g into `target`, laid out as slot_plan_.groups[g] says (each
  // rank casts its master shard into its place first); returns their handles.
  std::vector<std::unique_ptr<CommHandle>> gather_group_into(int group, const Buffer& target,
                                                             bool with_frozen);
  // Unpacks the f32 parts (or casts a tied embedding) of a gathered slot and binds the group.
  void bind_gathered(int group, int slot);
  // Mixed precision: unpacks the gathered f32 parts of `target` (or casts a group gathered in
  // f32 that the model also reads in the compute dtype); binds the group's views to `target`.
  void prepare_gathered(int group, const Buffer& target);
  void bind_group_views(int group, const Buffer& target);
  // Stages 1-2 in mixed precision: writes elements [first, first + count) of group g (host
  // f32) into its compute-dtype replica.
  void write_replica(int group, int64_t first, int64_t count, const float* values);
  // Whether the f32 master is a shard (stage 3, and stages 1-2 in mixed precision).
  bool sharded_masters() const { return stage_ == 3 || compute_replica_; }
  // Returns whether `group` is among the next `prefetch` uses of the pass.
  bool in_prefetch_window(int group) const;
  void prefetch_next_weights();
  SlotPool& weight_pool(int group) { return weight_pools_[weight_pool_of(group)]; }
  const SlotPool& weight_pool(int group) const { return weight_pools_[weight_pool_of(group)]; }
  SlotPool& gradient_pool(int group) { return gradient_pools_[gradient_pool_of(group)]; }
  size_t weight_pool_of(int group) const {
    return static_cast<size_t>(slot_plan_.pool[static_cast<size_t>(group)]);
  }
  size_t gradient_pool_of(int group) const {
    return static_cast<size_t>(gradient_plan_.pool[static_cast<size_t>(group)]);
  }
  void wait_weight_slots();
  void forget_weight_slots();
  // Stages 2-3: binds a zeroed gradient slot; starts the running-sum gather.
  void bind_gradient_slot(int group);
  void start_running_sum_gather(int group);
  // Called when group g's gradient is complete: starts its reduction.
  void reduce_gradient(int group);
  // Returns the op and the route of group g's reduction this micro-step: the all-reduce of
  // its gradient `grad` (stages 0-1) or the reduce-scatter of `p` out of its gradient slot's
  // `full` gradient.
  ReduceOp reduce_op() const { return fast_ ? ReduceOp::sum : ReduceOp::ordered_sum; }
  ReductionRoute all_reduce_route(int group, const Tensor& grad);
  ReductionRoute scatter_route(const PendingReduction& p, const Tensor& full);
  // shards_offloaded(): writes this rank's slice of group g's host gradient into `slice`.
  void upload_host_gradient_slice(int group, const Tensor& slice);
  void land_reduction(const ReductionRoute& route);
  // Advances reductions without blocking; with `wait_for_one`, first waits for the oldest
  // reduce-scatter (which frees its slot).
  void poll_reductions(bool wait_for_one);
  // Returns group g's reduced shard on the device: its grad_shard, or (shards_offloaded())
  // the staging slot of its pending reduction.
  Tensor reduced_shard(const PendingReduction& p) const;
  // Called when a reduction has fully arrived: with shards_offloaded(), queues the shard's
  // copy to the host optimizer's gradient on the offload stream; its staging slot is freed
  // when that copy has completed (release_downloaded_staging).
  void finish_reduction(const PendingReduction& p);
  // shards_offloaded(): frees the staging slots whose copy to the host has completed (with
  // `wait`, first waits for every copy queued so far); returns how many it freed.
  int release_downloaded_staging(bool wait);
  // shards_offloaded(): returns a free staging slot for group g, finishing the oldest
  // reductions and copies until one is free.
  int take_shard_staging(int group);
  bool scatter_pending() const;
  void finish_micro_step(bool last);
  // What the host reads back once a step (step_result_bytes).
  struct StepResults {
    std::vector<double> loss_sums;  // per micro-step
    ExactSquareSum::DigitCounters counters{};  // without offload
  };
  // Micro-step m's loss sum on the device (a double as u32 (2)).
  Tensor loss_sum_slot(int micro_step) const;
  // The gradient norm's digit counters on the device (Backend::accumulate_exact_squares).
  Tensor norm_counters() const;
  // Reads the step's results back (one wait on the device).
  StepResults read_step_results();
  // Adds this rank's gradient squares: queued into the device counters (read back with the
  // step's results), or offloaded, added from the host copies into `local` now.
  void add_local_squares(ExactSquareSum& local);
  // Returns the global gradient norm from every rank's `local` squares (exact, any order).
  double global_grad_norm(const ExactSquareSum& local);
  // Adds the squares of device tensor `values` to the counters, first folding them into `sum`
  // and zeroing them whenever they hold kExactCounterCapacity squares (over 2^32 gradient
  // elements on one rank).
  void add_device_squares(const Tensor& values, ExactSquareSum& sum);
  // Copies the counters to the host and adds what they hold to `sum`.
  void fold_norm_counters(ExactSquareSum& sum);
  void publish_weights();
  // Offload (engine_offload.cpp): builds the host optimizer; copies each group's reduced
  // gradient shard (and, when they changed on the device, the weights) to the host; steps the
  // host groups and brings the updated weights back, publishing each group as it arrives.
  void build_host_optimizer();
  void copy_gradients_to_host();
  void offloaded_step(double lr, double grad_scale);
  // shards_offloaded(): writes group g's device shard from its host master (cast to the
  // gather dtype, with the packed f32 parts); upload_stale_shard does it when the master was
  // written since the last upload.
  void upload_shard(int group);
  void upload_stale_shard(int group);
  // Returns the f32 master (offloaded: on the host) or gradient of group g's shard, elements
  // [0, shard_length), for the host optimizer's group index; null tensors when g has none.
  Tensor host_master(int group) const;
  Tensor host_gradient(int group) const;
  // Returns `elements` of `dtype` at `byte_offset` in group g's device weight shard.
  Tensor device_shard(int group, DType dtype, size_t byte_offset, int64_t elements) const;
  // Starts the fsdp all-gather that spreads group g's updated shard over its replica
  // (stages 1-2: with fsdp > 1, or in mixed precision); none otherwise. finish_publish
  // prepares the gathered group once they are done.
  std::vector<std::unique_ptr<CommHandle>> start_publish(int group);
  void finish_publish(int group);
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
  std::vector<Buffer> frozen_shards_;  // stage 3, LoRA: this rank's shard of each base group
  WeightSlotPlan slot_plan_;           // stage 3, and the replica of compute_replica_
  bool compute_replica_ = false;       // stages 1-2 in mixed precision (see the top)
  DType gather_dtype_ = DType::f32;    // what the layer groups travel in (sharded_masters())
  std::vector<std::vector<ParamSpan>> spans_;
  std::vector<std::vector<ElementRange>> norm_ranges_;
  std::vector<GroupStorage> storage_;
  std::unique_ptr<AdamW> optimizer_;          // without offload
  std::unique_ptr<HostAdamW> host_optimizer_;  // with offload (groups: optimizer_index)
  bool host_masters_stale_ = true;  // the device's weights were written since the last copy
  std::vector<bool> device_shard_stale_;  // shards_offloaded(): the host master is newer
  Buffer host_cast_staging_;  // shards_offloaded(): a master shard cast on the host
  Buffer step_results_;       // step_result_bytes: loss sums, then the norm's digit counters
  int64_t norm_counter_fill_ = 0;  // squares added to them since they were zeroed
  GradientSlotPlan gradient_plan_;     // stages 2-3
  std::array<SlotPool, 2> shard_staging_;  // shards_offloaded(), by gradient pool
  SlotPool running_sum_source_;  // shards_offloaded(), grad_accum > 1: this rank's slice
  std::array<SlotPool, 2> weight_pools_;    // stage 3 (slot_plan_.pool)
  std::array<SlotPool, 2> gradient_pools_;  // stages 2-3 (gradient_plan_.pool)
  SlotPool running_sum_slot_;
  std::unique_ptr<CommHandle> running_sum_gather_;
  bool fast_ = false;                    // mesh.reduce_mode() == ReduceMode::fast
  DType reduce_dtype_ = DType::f32;      // reduction_dtype(): what the gradients travel in
  std::array<SlotPool, 2> scatter_scratch_;  // fast, stages 2-3: beside gradient slot s
  std::array<ScatterScratch, 2> scatter_scratch_plan_;
  std::vector<PendingAllReduce> all_reduces_;              // stages 0-1
  std::deque<PendingReduction> reductions_;                // stages 2-3
  std::vector<int> gradient_slot_of_;                      // group -> slot, or -1
  Pass pass_ = Pass::idle;
  bool inference_ = false;  // inside run_inference: each forward pass is an eval pass
  int micro_step_ = 0;
  std::vector<int> weight_uses_;  // the order a pass reads groups (stage 3 prefetch)
  std::vector<CpLocalBatch> local_rows_;  // context parallelism: this rank's rows of a step
  std::vector<Batch> local_batches_;
  size_t use_position_ = 0;
  GroupSpan group_span_;
  // shards_offloaded(): the copy stream reduced gradient shards leave the device on while
  // backward goes on, and per staging pool and slot the event of the copy out of it (null when
  // none is in flight). Declared last: destroyed first, after its queued copies have run.
  std::unique_ptr<Stream> offload_stream_;
  std::array<std::vector<std::unique_ptr<Event>>, 2> staging_downloads_;
};

}  // namespace anvil
