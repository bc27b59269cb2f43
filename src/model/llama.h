// LlamaModel: a Llama-family decoder on one backend, with explicit forward and backward.
// It owns f32 master weights and gradients (ParameterSet, one flat buffer per group) and an
// activation arena sized once for (max_batch, max_seq); a step allocates nothing. Gradients
// accumulate (+=) across calls so micro-batches add up; the caller zeroes them.
// The model is single-device code: a parallel layer observes group boundaries through
// GroupHooks (to gather, free or reduce a group) and never changes what the model computes.
// Activation checkpointing keeps only each layer's input and recomputes the layer in
// backward with the same ops in the same order, so gradients are bitwise identical.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/activations.h"
#include "model/batch.h"
#include "model/block_context.h"
#include "model/compute_weights.h"
#include "model/context_parallel.h"
#include "model/head_block.h"
#include "model/kv_cache.h"
#include "model/llama_config.h"
#include "model/llama_parameters.h"
#include "model/lora.h"
#include "model/lora_frozen_base.h"
#include "model/tensor_parallel.h"
#include "model/vocab_parallel.h"

namespace anvil {

struct ModelOptions {
  int max_batch = 1;                 // largest B any call will use
  int max_seq = 0;                   // largest T any call will use (0 = config.max_seq_len)
  // f32, or bf16 for mixed precision: bf16 activations and GEMM operands with f32
  // accumulation, f32 master weights, gradients, residual stream, norms and loss.
  DType compute_dtype = DType::f32;
  bool activation_checkpointing = false;
  bool decay_embeddings = true;  // weight decay flag of model.embed_tokens.weight
  // Rows of logits materialised at once by the head (0 = as many as fit in 2^23 floats).
  int64_t logits_chunk_rows = 0;
  // When false the model allocates no buffers for the trainable weights (gradients): every
  // weight, or with LoRA the adapters. A parallel layer then binds each group to storage it
  // owns (bind_trainable_weights / bind_trainable_gradients) before the group is used.
  bool allocate_weights = true;
  bool allocate_gradients = true;
  // Mixed precision with an f32 base: when false the model holds no compute-dtype copy of the
  // weights; a parallel layer gathers each group in the compute dtype and binds it
  // (bind_compute_weights) before the group is used (ZeRO-3).
  bool allocate_compute_copies = true;
  // LoRA adapters (lora.r > 0): the base weights are frozen (no gradients, no optimizer state).
  LoraOptions lora;
  // The dtype the frozen LoRA base is held in: f32, or bf16 (half the bytes; needs
  // compute_dtype bf16). Unset: the compute dtype.
  std::optional<DType> lora_base_dtype;
  // When false (LoRA only) the frozen base has no buffers of its own: a parallel layer binds
  // each group (bind_weights) before it is used, as it does under ZeRO-3.
  bool allocate_frozen = true;
  // Tensor parallelism: the model holds tp rank `tp.rank`'s shard of every split parameter
  // (shapes of tp_shard_config) and calls tp.ops where partial results meet. Training and
  // loss evaluation only: full logits and KV-cache decoding need the whole model.
  TensorParallel tp;
  // Each layer's attention mask beyond causal and documents (window, sparse pattern, sinks).
  AttentionSchedule attention;
  // Context parallelism: each call's batch holds this cp rank's rows of every sequence
  // (tokens, targets, mask (B, T / cp) in the layout of model/context_parallel.h; doc_ids the
  // whole (B, T)), and max_seq counts local rows. Training and loss evaluation only.
  ContextParallel cp;
};

// Bytes a model's own buffers hold, by purpose (what a parallel layer binds into the model is
// counted by that layer; the optimizer state is the trainer's). `anvil plan` predicts these
// without allocating (LlamaModel::planned_memory); what a run holds is measured by the
// backend's counters (Allocator::memory_snapshot).
struct ModelMemory {
  size_t frozen = 0;          // the frozen LoRA base (with its f32 norm copies)
  size_t trainable = 0;       // f32 trainable parameters
  size_t compute_copies = 0;  // compute-dtype copies of weights (mixed precision)
  size_t gradients = 0;       // f32 gradients of the trainable parameters
  size_t activations = 0;     // the activation arena
  // Context parallelism's ring buffers: the blocks that travel (communication) and the
  // ring attention's scratch (workspace).
  size_t ring_blocks = 0;
  size_t ring_scratch = 0;
  int64_t trainable_count = 0;  // number of trainable parameter elements
};

// Observer of parameter-group use, called on the thread that runs the model. A group's
// weights are read between before_forward and after_forward, or between before_backward and
// after_backward. forward_backward with L layers (head group H = L + 1) calls:
//   before_forward(0) after_forward(0); for l = 1..L: before_forward(l) after_forward(l);
//   before_forward(H) after_backward(H)  (the head runs forward and backward fused);
//   for l = L..1: before_backward(l) after_backward(l);  before_backward(0) after_backward(0).
// after_backward(g) means g's gradients are complete for this call. With tied embeddings the
// head also reads group 0's weights and adds to group 0's gradient (complete only at
// after_backward(0)), so group 0 must stay available from before_forward(0) to the end.
// forward_loss, forward_logits and forward_step call only the forward pairs.
class GroupHooks {
 public:
  virtual ~GroupHooks() = default;
  // Called before the weights of `group` are read by the forward pass.
  virtual void before_forward(int group) { (void)group; }
  // Called when the forward pass is done with the weights of `group`.
  virtual void after_forward(int group) { (void)group; }
  // Called before the backward pass (and any recomputation) reads the weights of `group`.
  virtual void before_backward(int group) { (void)group; }
  // Called when the gradients of `group` are complete for this call.
  virtual void after_backward(int group) { (void)group; }
};

class LlamaModel {
 public:
  // Builds the layout, allocates zero weights, zero gradients and the activation arena.
  LlamaModel(const LlamaConfig& config, Backend& backend, const ModelOptions& options);
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  // Returns the model's config (the whole model, whatever the tensor-parallel split).
  const LlamaConfig& config() const { return full_config_; }
  // Returns the shapes this model instance computes with: config() cut by tp_shard_config.
  const LlamaConfig& shard_config() const { return config_; }
  // Returns the layouts of the whole model (the base, and what trains), with the full
  // shapes; parameters() and trainable() hold this tp rank's shards of them (the same layouts
  // without tensor parallelism). Parameter i of one is parameter i of the other.
  const ParameterLayout& full_layout() const { return *full_layout_; }
  const ParameterLayout& full_trainable_layout() const {
    return lora_.enabled() ? *full_lora_layout_ : *full_layout_;
  }
  const ModelOptions& options() const { return options_; }
  Backend& backend() const { return *backend_; }
  // Returns the base weights: the f32 masters, or with LoRA the frozen base (f32 or bf16).
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  // Returns the f32 gradients (same layout as parameters()).
  ParameterSet& gradients() { return grads_; }
  const ParameterSet& gradients() const { return grads_; }
  // Returns the bytes of the activation arena.
  size_t activation_bytes() const { return arena_.bytes(); }
  // Returns whether LoRA adapters are on (options().lora.enabled()).
  bool lora_enabled() const { return lora_.enabled(); }
  // Returns what training updates: the adapters with LoRA (groups numbered as parameters():
  // group 0 and the head group empty, group 1 + l layer l's A and B), else parameters().
  ParameterSet& trainable() { return lora_.enabled() ? lora_.parameters() : params_; }
  const ParameterSet& trainable() const { return lora_.enabled() ? lora_.parameters() : params_; }
  // Returns the gradients of trainable() (same layout).
  ParameterSet& trainable_gradients() { return lora_.enabled() ? lora_.gradients() : grads_; }
  const ParameterSet& trainable_gradients() const {
    return lora_.enabled() ? lora_.gradients() : grads_;
  }
  // Returns the adapters (disabled when options().lora.r == 0).
  const LoraAdapters& lora() const { return lora_; }
  // Initialises the adapters: A Kaiming-uniform (bound 1/sqrt(in)), B zero; deterministic in
  // (seed, name). Throws without LoRA.
  void init_lora(uint64_t seed);
  // Folds every adapter into its base matrix (W += scale * B @ A, f32 base only) and zeroes
  // the B matrices, so the model computes the same logits without adapter arithmetic.
  void merge_lora();
  // Sets the per-step value the adapter dropout masks of forward_backward derive from.
  void set_dropout_step(int64_t step) { dropout_step_ = step; }
  // Sets the global index of the micro-batch the next forward_backward runs within its step
  // (m * world + rank, as the parallel engine numbers them), so every micro-batch of a step
  // draws its own masks, and the same ones at any world size.
  void set_dropout_micro_batch(int64_t index) { dropout_micro_batch_ = index; }
  // Returns the bytes the model holds, by purpose.
  ModelMemory memory() const;
  // Returns the bytes a model of `config` built with `options` would hold (what memory()
  // reports once built), from the same layouts and the same arena carve, allocating nothing;
  // throws as the constructor would for options it refuses (the collectives behind tp and cp
  // are not needed).
  static ModelMemory planned_memory(const LlamaConfig& config, const ModelOptions& options);
  // Returns the activation views the same arena carve hands a model of `config` built with
  // `options`, with no memory behind them (shapes and dtypes only: the head's logits chunk,
  // for one, is logits.numel() / the shard's vocabulary rows), allocating nothing.
  static ModelActivations planned_activations(const LlamaConfig& config,
                                              const ModelOptions& options);
  // Returns the dtype the frozen LoRA base of a model built with `options` is held in (f32
  // without LoRA).
  static DType frozen_base_dtype(const ModelOptions& options);
  // Writes base parameter `index` (layout order of parameters()) from host f32 values into
  // wherever the model stores it (f32 masters, or the bf16-only store of a frozen bf16 base).
  void set_parameter(int index, const float* host);
  // Reads base parameter `index` into host f32 values (exact widening from bf16 storage).
  void get_parameter(int index, float* host);

  // Initialises the weights deterministically from `seed` (see init_llama_weights).
  void init_weights(uint64_t seed);
  // Sets the group observer (nullptr removes it).
  void set_group_hooks(GroupHooks* hooks) { hooks_ = hooks; }
  // Points the base weights of `group` (parameters(); parameters().dtype(), at least the
  // group's padded size; not owned) at `storage` until rebound; what the model computes from
  // the same values does not change.
  void bind_weights(int group, const Tensor& storage);
  // Points the gradients of `group` at `storage`, as bind_weights does for weights.
  void bind_gradients(int group, const Tensor& storage);
  // Binds group `group` of trainable() (trainable_gradients()): the base weights
  // (gradients), or with LoRA the adapters.
  void bind_trainable_weights(int group, const Tensor& storage);
  void bind_trainable_gradients(int group, const Tensor& storage);
  // Returns whether the parallel layer must bind each group's compute-dtype weights
  // (options().allocate_compute_copies false in a mixed-precision model with an f32 base).
  bool binds_compute_weights() const { return compute_.enabled() && !compute_.owns_copies(); }
  // Points the weights `group` computes with at `compute` (the group in the compute dtype)
  // and `f32` (its f32 parts, packed; ComputeWeights::parts) until rebound; not owned.
  void bind_compute_weights(int group, const Tensor& compute, const Tensor& f32);
  // Writes the initial values of full_trainable_layout() group `group` (layout size, padding
  // zero) into host memory: init_llama_group, or with LoRA the adapters' init (A
  // Kaiming-uniform, B 0). A tp rank's shard takes its part (the parallel layer maps it).
  void init_trainable_group(int group, uint64_t seed, float* host) const;

  // Runs forward and backward: gradients += d(grad_scale * sum of token losses)/d(weights).
  // Queues the batch's (unscaled) loss sum, a double added in row order, into `loss_sum` (u32
  // (2) on the model's device, 8-byte aligned) without waiting for it, and returns the
  // batch's counted-token count (from the host's targets): a training step reads all its loss
  // sums back at once.
  int64_t forward_backward(const Batch& batch, float grad_scale, const Tensor& loss_sum);
  // The same, reading the loss sum back (one wait on a device backend): returns the loss sum
  // and the counted-token count.
  LossSum forward_backward(const Batch& batch, float grad_scale);
  // Returns the loss sum and count without touching gradients (evaluation).
  LossSum forward_loss(const Batch& batch);
  // Writes logits (B, T, V) f32 for tokens (B, T); doc_ids (B, T) optional.
  void forward_logits(const Tensor& tokens, const Tensor& logits, const Tensor* doc_ids = nullptr);
  // Appends tokens (B, n) at positions [cache.length(), +n) to the cache and writes the logits
  // of each row's last new token to logits (B, V) f32: prefill a prompt in one call, then
  // decode one token per call. No earlier position is recomputed.
  void forward_step(const Tensor& tokens, KvCache& cache, const Tensor& logits);
  // As above, but writes the logits of the chosen new positions: `positions` holds flattened
  // indices b * n + t into tokens (B, n), logits is (positions.size(), V) f32. With no
  // positions only the cache is filled (prefilling a prefix). Scoring continuations uses this.
  void forward_step(const Tensor& tokens, KvCache& cache, std::span<const int64_t> positions,
                    const Tensor& logits);
  // Returns the number of positions of a batch that count towards the loss.
  int64_t count_loss_tokens(const Batch& batch);

 private:
  // Returns `options` with max_seq resolved (0: the shard's max_seq_len / cp).
  static ModelOptions resolved_options(const LlamaConfig& shard_config, ModelOptions options);
  // Throws unless resolved `options` can build a model of `shard_config`.
  static void check_options(const LlamaConfig& shard_config, const ModelOptions& options);
  // Carves everything the activation arena holds for resolved `options`: the activations, the
  // adapters' saved tensors and scratch and the frozen norms' gradient sink (LoRA), the
  // vocabulary-parallel scratch (tp > 1). The constructor carves its members; planned_memory
  // carves throwaway views to measure.
  static void carve_arena(Arena& arena, const LlamaConfig& shard_config,
                          const ModelOptions& options, ModelActivations& acts,
                          LoraActivations& lora, Tensor& norm_grad_sink,
                          VocabParallelScratch& vocab_parallel);
  // Returns the bytes of the parameter-side buffers (everything but the activations) a model
  // of `shard_config` built with resolved `options` holds.
  static ModelMemory parameter_memory(const LlamaConfig& shard_config, const ModelOptions& options);

  // Checks (B, T) and the inputs, copies them to the device when needed, fills positions.
  StepDims prepare_inputs(const Tensor& tokens, const Tensor* targets, const Tensor* loss_mask,
                          const Tensor* doc_ids, int position_offset);
  BlockContext make_context(StepDims dims) const;
  // Runs layer `layer` from residual[layer] into residual[layer + 1], saving into `stored`.
  // `set` indexes acts_.layers (and the adapters' saved sets); dropout only when `training`.
  void layer_forward(const BlockContext& ctx, int layer, int set, bool training);
  // Runs the embedding and every layer; without save_for_backward all layers share one set.
  void embed_and_layers_forward(const BlockContext& ctx, bool save_for_backward);
  LayerActivations& saved_activations(int layer);
  LossTargets loss_targets() const;
  // Returns the double a loss_sum tensor holds (reads it back).
  double read_loss_sum(const Tensor& loss_sum);
  void call_hook(void (GroupHooks::*hook)(int), int group);
  // Calls before_forward(group), then refreshes the group's compute-dtype weight copy.
  void begin_forward(int group);
  // Calls before_backward(group), then re-points the group's compute views at its masters.
  void begin_backward(int group);
  // Returns the weights the blocks compute with (the masters for an f32 model).
  const LlamaWeights& compute_weights() const {
    if (bf16_base_.enabled()) return bf16_base_.views();
    return compute_.enabled() ? compute_.views() : weights_;
  }
  // Returns layer `layer`'s adapter context for this step using saved set `set`, or nullptr
  // without LoRA; dropout applies only when `training`.
  const LoraLayerStep* lora_step(int layer, StepDims dims, int set, bool training);
  // Returns the saved-activation set of `layer` (0 when recomputed).
  int saved_set(int layer) const { return options_.activation_checkpointing ? 0 : layer; }

  LlamaConfig full_config_;
  LlamaConfig config_;  // the shard's shapes (full_config_ without tensor parallelism)
  Backend* backend_;
  ModelOptions options_;
  std::shared_ptr<const ParameterLayout> layout_;
  std::shared_ptr<const ParameterLayout> full_layout_;       // layout_ without tp
  std::shared_ptr<const ParameterLayout> full_lora_layout_;  // LoRA only
  VocabParallelScratch vocab_parallel_;  // carved under tensor parallelism only
  std::unique_ptr<ContextParallelScratch> cp_scratch_;  // under context parallelism only
  ParameterSet params_;
  ParameterSet grads_;
  LlamaWeights weights_;
  LlamaWeights grad_views_;
  ComputeWeights compute_;  // bf16 copies of f32 weights; empty for an f32 model
  Bf16BaseViews bf16_base_;  // views of a bf16 LoRA base; empty otherwise
  LoraAdapters lora_;
  LoraLayerStep lora_step_;  // storage behind lora_step()'s pointer
  int64_t dropout_step_ = 0;
  int64_t dropout_micro_batch_ = 0;
  Tensor norm_grad_sink_;  // (C) f32, carved only with LoRA (see BlockContext)
  Arena arena_;
  ModelActivations acts_;
  GroupHooks* hooks_ = nullptr;
  // Host staging, sized once: positions to upload, targets/mask to read back.
  std::vector<int32_t> host_positions_;
  std::vector<int32_t> host_targets_;
  std::vector<float> host_mask_;
  StepDims positions_dims_;
  int positions_offset_ = -1;
  // Device views of the current call's inputs (N) (doc ids as (B, T)); undefined if absent.
  Tensor tokens_view_;
  Tensor targets_view_;
  Tensor mask_view_;
  Tensor doc_ids_view_;
};

}  // namespace anvil
