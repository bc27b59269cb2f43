// Bf16BaseViews: per-group views of a bf16 frozen base, with f32 copies of its norm weights.
#include "model/lora_frozen_base.h"

#include "core/error.h"

namespace anvil {

Bf16BaseViews::Bf16BaseViews(const LlamaConfig& config, Backend& backend)
    : config_(config), backend_(&backend) {
  // The f32 norm copies belong to the frozen base they are cast from.
  norms_ = Buffer(backend, planned_bytes(config_), MemoryCategory::frozen_weights);
  views_.layers.resize(static_cast<size_t>(config_.n_layers));
}

size_t Bf16BaseViews::planned_bytes(const LlamaConfig& config) {
  const int64_t norms = 2 * int64_t{config.n_layers} + 1;
  return static_cast<size_t>(norms * config.dim) * sizeof(float);
}

Tensor Bf16BaseViews::cast_norm(const Tensor& stored, int index) {
  const Tensor copy = norms_.as(DType::f32, Shape{(2 * int64_t{config_.n_layers} + 1) *
                                                  config_.dim})
                          .flat(int64_t{index} * config_.dim, config_.dim);
  if (!stored.defined()) return Tensor();
  backend_->cast(stored, copy);
  return copy;
}

void Bf16BaseViews::refresh(int group, const LlamaWeights& stored) {
  if (group == kEmbeddingGroup) {
    views_.embedding = stored.embedding;
    if (config_.tie_embeddings) views_.lm_head = stored.embedding;
    return;
  }
  if (group == head_group(config_)) {
    views_.final_norm = cast_norm(stored.final_norm, 2 * config_.n_layers);
    if (!config_.tie_embeddings) views_.lm_head = stored.lm_head;
    return;
  }
  const int l = group - layer_group(0);
  ANVIL_CHECK(l >= 0 && l < config_.n_layers, "[model] group {} is not a Llama group", group);
  LayerWeights& w = views_.layers[static_cast<size_t>(l)];
  w = stored.layers[static_cast<size_t>(l)];
  w.attn_norm = cast_norm(w.attn_norm, 2 * l);
  w.mlp_norm = cast_norm(w.mlp_norm, 2 * l + 1);
}

}  // namespace anvil
