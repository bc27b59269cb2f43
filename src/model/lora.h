// LoRA adapters for a LlamaModel: options, PEFT names, the adapter parameter layout and the
// per-layer math. An adapted projection computes y = x W^T + scale * (drop(x) A^T) B^T with
// A (r, in), B (out, r) and scale = alpha / r, exactly as PEFT's lora.Linear. The adapters are
// f32 parameters in their own ParameterSet whose groups mirror the base layout (group 0 and
// the head group are empty; group 1 + l holds layer l's A and B in target order), so the
// trainer, optimizer and checkpoints handle them as they handle a full model. The base is
// frozen: it has no gradients. Dropout masks come from the backend's counter-hash dropout op
// with a seed that depends only on (step, global micro-batch, layer, target), so recomputation
// reproduces them and any world size draws the same ones.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/arena.h"
#include "model/llama_config.h"
#include "model/parameters.h"
#include "model/tensor_parallel.h"

namespace anvil {

struct LoraOptions {
  int r = 0;                         // 0: no adapters (plain model)
  float alpha = 8.0f;                // scale = alpha / r
  float dropout = 0.0f;              // on the adapter input, in forward_backward only
  // Subset of lora_target_names() (the parameter table's LoRA modules).
  std::vector<std::string> targets;
  bool enabled() const { return r > 0; }
  float scale() const { return alpha / r; }
};

// Returns the PEFT name of an adapter matrix: lora_param_name(3, "q_proj", 'A') is
// "model.layers.3.self_attn.q_proj.lora_A.weight" (no "base_model.model." prefix).
std::string lora_param_name(int layer, const std::string& target, char which);

// The projections an adapter can wrap, in the order adapters are laid out in a group: the
// parameter table's LoRA rows in table order (parameter_table.cpp checks this at compile time).
// The attention and MLP blocks name the adapter they run with it.
enum class LoraTarget : int { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
inline constexpr int kLoraTargetCount = 7;
// Returns the PEFT module names of the targets, in LoraTarget order (from the parameter table).
const std::array<std::string, kLoraTargetCount>& lora_target_names();
// Returns the target of a module name; throws listing the valid names for any other name.
LoraTarget parse_lora_target(const std::string& name);
// Returns the (out, in) shape of the base matrix a target wraps (its parameter table row).
std::array<int64_t, 2> lora_target_dims(const LlamaConfig& config, LoraTarget target);
// Throws unless r >= 1, alpha > 0, dropout in [0, 1) and targets are known, distinct and
// non-empty.
void validate_lora_options(const LoraOptions& options);

// Builds the adapter layout: for each layer, for each enabled target in LoraTarget order,
// lora_A (r, in) then lora_B (out, r), both with weight decay, in group 1 + l; groups 0 and
// n_layers + 1 exist and are empty.
std::shared_ptr<const ParameterLayout> make_lora_layout(const LlamaConfig& config,
                                                        const LoraOptions& options);

// Writes group `group` of an adapter layout's initial values into host memory (layout size,
// padding zero): every lora_A Kaiming-uniform (bound 1/sqrt(in)) from (seed, name), lora_B 0.
void init_lora_group(const ParameterLayout& layout, int group, uint64_t seed, float* host);

// Views of one layer's adapters (weights, compute copies or gradients); undefined when the
// target is not adapted.
struct LoraLayerViews {
  std::array<Tensor, kLoraTargetCount> a;  // (r, in)
  std::array<Tensor, kLoraTargetCount> b;  // (out, r)
};

// Returns layer `layer`'s views of a set built on make_lora_layout(config, options); all
// undefined when the layer's group has no storage.
LoraLayerViews lora_layer_views(const LlamaConfig& config, const LoraOptions& options,
                                const ParameterSet& set, int layer);

// Everything one layer's blocks need to run their adapters in one step; built by the model.
struct LoraLayerStep {
  Backend* backend = nullptr;
  const LoraLayerViews* weights = nullptr;    // compute-dtype views of A and B
  const LoraLayerViews* gradients = nullptr;  // f32 gradient views (backward only)
  std::array<Tensor, kLoraTargetCount> hidden;  // (N, r) compute: drop(x) A^T, saved
  Tensor dropped_input;  // (N, max_in) compute scratch for drop(x)
  Tensor d_hidden;       // (N, r) compute scratch
  Tensor d_input;        // (N, max_in) f32 scratch for the dropout backward
  float scale = 1.0f;
  float dropout = 0.0f;     // 0 outside forward_backward
  uint64_t dropout_seed = 0;  // per (step, micro-batch, layer); each target derives its own
  // Under tensor parallelism the adapters of row-parallel bases (o, down) have A split on
  // its input and sum their hidden state over tp; those of column-parallel bases have B split
  // on its output and sum the hidden state's gradient.
  TensorParallel tp;
  // Under sequence parallelism a row-parallel base's output holds only this rank's rows,
  // starting at this row of the batch; the adapter adds its part to those rows only.
  int64_t row_begin = 0;

  // Returns whether `target` carries an adapter.
  bool adapted(LoraTarget target) const;
};

// y (N, out) += scale * (drop(x) A^T) B^T, saving drop(x) A^T into step.hidden[target]; a no-op
// for a target without adapter. x (N, in) and y in the compute dtype (y may be f32). Under
// tensor parallelism y must already be the full (all-reduced) output of a row-parallel base.
void lora_forward(const LoraLayerStep& step, LoraTarget target, const Tensor& x, const Tensor& y);
// Backward of lora_forward: dB += scale * dy^T h, dA += (scale * dy B)^T drop(x), and
// dx (N, in) += drop^T((scale * dy B) A). x is the forward input; a no-op without adapter.
// Under tensor parallelism dx receives this rank's partial term, like the base's.
void lora_backward(const LoraLayerStep& step, LoraTarget target, const Tensor& x,
                   const Tensor& dy, const Tensor& dx);

// What the adapters keep in the model's activation arena: each saved set's hidden states
// drop(x) A^T per target (max_rows, r) compute, and the scratch of one step's backward.
struct LoraActivations {
  std::vector<std::array<Tensor, kLoraTargetCount>> hidden;  // layer_sets x targets
  Tensor dropped_input;  // (max_rows, max_in) compute, with dropout only
  Tensor d_hidden;       // (max_rows, r) compute
  Tensor d_input;        // (max_rows, max_in) f32, with dropout only

  // Carves them for adapters `options` on a model of (shard) config `config`; max_in is the
  // widest input of a target.
  void carve(Arena& arena, const LlamaConfig& config, const LoraOptions& options, DType compute,
             int64_t max_rows, int layer_sets);
};

// The adapters of a model: f32 parameters and gradients, compute-dtype copies (bf16 models),
// saved activations and scratch. Owned by LlamaModel when ModelOptions::lora.enabled().
class LoraAdapters {
 public:
  LoraAdapters() = default;
  // Builds the layout and allocates zero compute copies, and zero parameters (gradients)
  // unless a parallel layer provides them (bind_weights / bind_gradients).
  LoraAdapters(const LlamaConfig& config, const LoraOptions& options, Backend& backend,
               DType compute_dtype, bool allocate_weights = true, bool allocate_gradients = true);
  // Returns the saved activations and scratch, which the model carves inside its arena build.
  LoraActivations& activations() { return activations_; }

  bool enabled() const { return options_.enabled(); }
  const LoraOptions& options() const { return options_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  ParameterSet& gradients() { return grads_; }
  const ParameterSet& gradients() const { return grads_; }
  // Returns the f32 views of layer `layer`'s adapters.
  const LoraLayerViews& layer(int layer) const { return views_[layer]; }

  // Points group `group`'s adapters (gradients) at `storage` (f32, not owned).
  void bind_weights(int group, const Tensor& storage);
  void bind_gradients(int group, const Tensor& storage);
  // Initialises A Kaiming-uniform (bound 1/sqrt(in)) and B zero, from (seed, name).
  void init(uint64_t seed);
  // Writes group `group`'s initial values (layout size, padding zero) into host memory.
  void init_group(int group, uint64_t seed, float* host) const;
  // Casts group `group`'s f32 adapters into their compute copies (bf16 models only).
  void refresh(int group);
  // Returns the step context of `layer` for `rows` rows using saved set `set`; dropout is off
  // unless `training`, and its seed derives from (dropout_stream, layer): the stream names the
  // (step, micro-batch) being trained.
  LoraLayerStep step(int layer, int64_t rows, int set, bool training,
                     uint64_t dropout_stream) const;

 private:
  LlamaConfig config_;
  LoraOptions options_;
  Backend* backend_ = nullptr;
  DType compute_dtype_ = DType::f32;
  std::shared_ptr<const ParameterLayout> layout_;
  ParameterSet params_;
  ParameterSet grads_;
  std::vector<LoraLayerViews> views_;
  std::vector<LoraLayerViews> grad_views_;
  ParameterSet copies_;  // compute dtype; unallocated for an f32 model
  std::vector<LoraLayerViews> compute_views_;
  LoraActivations activations_;
};

}  // namespace anvil
