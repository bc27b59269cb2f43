// LoraAdapters: storage of a model's adapters (f32 parameters and gradients, compute-dtype
// copies for bf16 models), their initialisation, and the per-step contexts the blocks use.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/counter_hash.h"
#include "core/error.h"
#include "model/llama_parameters.h"
#include "model/lora.h"
#include "model/random.h"

namespace anvil {

LoraAdapters::LoraAdapters(const LlamaConfig& config, const LoraOptions& options,
                           Backend& backend, DType compute_dtype, bool allocate_weights,
                           bool allocate_gradients)
    : config_(config), options_(options), backend_(&backend), compute_dtype_(compute_dtype) {
  layout_ = make_lora_layout(config_, options_);
  params_ = ParameterSet(layout_, backend, MemoryCategory::trainable_weights, allocate_weights);
  grads_ = ParameterSet(layout_, backend, MemoryCategory::gradients, allocate_gradients);
  copies_ = ParameterSet(layout_, backend, MemoryCategory::workspace, compute_dtype_ != DType::f32,
                         compute_dtype_);
  views_.resize(static_cast<size_t>(config_.n_layers));
  grad_views_.resize(views_.size());
  compute_views_.resize(views_.size());
  for (int l = 0; l < config_.n_layers; ++l) {
    views_[l] = lora_layer_views(config_, options_, params_, l);
    grad_views_[l] = lora_layer_views(config_, options_, grads_, l);
    compute_views_[l] = compute_dtype_ == DType::f32
                            ? views_[l]
                            : lora_layer_views(config_, options_, copies_, l);
  }
}

void LoraAdapters::bind_weights(int group, const Tensor& storage) {
  params_.bind(group, storage);
  const int l = group - layer_group(0);
  if (l < 0 || l >= config_.n_layers) return;  // the empty embedding and head groups
  views_[l] = lora_layer_views(config_, options_, params_, l);
  if (compute_dtype_ == DType::f32) compute_views_[l] = views_[l];
}

void LoraAdapters::bind_gradients(int group, const Tensor& storage) {
  grads_.bind(group, storage);
  const int l = group - layer_group(0);
  if (l >= 0 && l < config_.n_layers) grad_views_[l] = lora_layer_views(config_, options_, grads_, l);
}

void LoraActivations::carve(Arena& arena, const LlamaConfig& config, const LoraOptions& options,
                            DType compute, int64_t max_rows, int layer_sets) {
  hidden.assign(static_cast<size_t>(layer_sets), {});
  std::array<bool, kLoraTargetCount> enabled{};
  int64_t max_in = 0;
  for (const std::string& target : options.targets) {
    const LoraTarget t = parse_lora_target(target);
    enabled[static_cast<int>(t)] = true;
    max_in = std::max(max_in, lora_target_dims(config, t)[1]);
  }
  for (auto& set : hidden) {
    for (int i = 0; i < kLoraTargetCount; ++i)
      if (enabled[i]) set[i] = arena.take(compute, Shape{max_rows * options.r});
  }
  d_hidden = arena.take(compute, Shape{max_rows * options.r});
  if (options.dropout > 0.0f) {
    dropped_input = arena.take(compute, Shape{max_rows * max_in});
    d_input = arena.take(DType::f32, Shape{max_rows * max_in});
  }
}

void LoraAdapters::init(uint64_t seed) {
  std::vector<float> host;
  for (int g = 0; g < layout_->group_count(); ++g) {
    if (layout_->group_numel(g) == 0) continue;
    host.resize(static_cast<size_t>(layout_->group_numel(g)));
    init_group(g, seed, host.data());
    backend_->copy_from_host(params_.group(g), host.data());
  }
}

void LoraAdapters::init_group(int group, uint64_t seed, float* host) const {
  init_lora_group(*layout_, group, seed, host);
}

void init_lora_group(const ParameterLayout& layout, int group, uint64_t seed, float* host) {
  std::fill(host, host + layout.group_numel(group), 0.0f);
  for (const ParameterInfo& info : layout.params()) {
    if (info.group != group || info.name.find(".lora_A.") == std::string::npos) continue;
    // lora_A: kaiming_uniform_(a=sqrt(5)) on (r, in) is uniform(-1/sqrt(in), 1/sqrt(in)).
    const double bound = 1.0 / std::sqrt(static_cast<double>(info.shape[1]));
    const uint64_t stream = fnv1a64(info.name);
    float* out = host + info.offset;
    for (int64_t i = 0; i < info.numel(); ++i) {
      const double u = random_uniform(seed, stream, static_cast<uint64_t>(i));
      out[i] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
  }
}

void LoraAdapters::refresh(int group) {
  if (compute_dtype_ == DType::f32 || layout_->group_numel(group) == 0) return;
  backend_->cast(params_.group(group), copies_.group(group));
}

LoraLayerStep LoraAdapters::step(int layer, int64_t rows, int set, bool training,
                                 uint64_t dropout_stream) const {
  LoraLayerStep s;
  s.backend = backend_;
  s.weights = &compute_views_[layer];
  s.gradients = &grad_views_[layer];
  const int64_t r = options_.r;
  for (int i = 0; i < kLoraTargetCount; ++i) {
    const Tensor& hidden = activations_.hidden[set][i];
    if (hidden.defined()) s.hidden[i] = hidden.flat(0, rows * r).view(Shape{rows, r});
  }
  s.d_hidden = activations_.d_hidden.flat(0, rows * r).view(Shape{rows, r});
  s.scale = options_.scale();
  if (training && options_.dropout > 0.0f) {
    s.dropout = options_.dropout;
    s.dropout_seed = dropout_hash(dropout_stream,
                                  0x4C6F5241ull + static_cast<uint64_t>(layer));
    s.dropped_input = activations_.dropped_input;
    s.d_input = activations_.d_input;
  }
  return s;
}

}  // namespace anvil
