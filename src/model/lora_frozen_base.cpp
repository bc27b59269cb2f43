// FrozenBf16Base storage: bf16 group buffers at the layout's offsets for matrices and biases,
// separate f32 buffers for norm weights and the embedding table.
#include "model/lora_frozen_base.h"

#include <string_view>

#include "core/error.h"

namespace anvil {

namespace {

// Returns whether a parameter is a GEMM operand (matrix or bias) rather than a norm weight or
// the embedding lookup table.
bool stored_in_bf16(const ParameterInfo& info) {
  if (info.group == kEmbeddingGroup) return false;
  const std::string_view name = info.name;
  return info.shape.rank() == 2 || name.substr(name.size() - 5) == ".bias";
}

}  // namespace

FrozenBf16Base::FrozenBf16Base(const LlamaConfig& config,
                               std::shared_ptr<const ParameterLayout> layout, Backend& backend)
    : config_(config), layout_(std::move(layout)), backend_(&backend) {
  const auto& params = layout_->params();
  bf16_groups_.resize(static_cast<size_t>(layout_->group_count()));
  for (int g = 0; g < layout_->group_count(); ++g) {
    const bool needs_copy = g != kEmbeddingGroup || config_.tie_embeddings;
    if (needs_copy)
      bf16_groups_[g] = Buffer(backend, static_cast<size_t>(layout_->group_numel(g)) * 2);
  }
  f32_tensors_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!stored_in_bf16(params[i]))
      f32_tensors_[i] = Buffer(backend, static_cast<size_t>(params[i].numel()) * sizeof(float));
  }
  for (int i = 0; i < static_cast<int>(params.size()); ++i) backend_->fill_zero(tensor(i));
  if (config_.tie_embeddings) {
    const int64_t numel = layout_->group_numel(kEmbeddingGroup);
    backend_->fill_zero(bf16_groups_[kEmbeddingGroup].as(DType::bf16, Shape{numel}));
  }

  views_.layers.resize(config_.n_layers);
  auto view = [&](const std::string& name) { return tensor(layout_->index_of(name)); };
  views_.embedding = view("model.embed_tokens.weight");
  if (config_.tie_embeddings) {
    views_.lm_head = bf16_groups_[kEmbeddingGroup].as(DType::bf16, views_.embedding.shape);
  } else {
    views_.lm_head = view("lm_head.weight");
  }
  views_.final_norm = view("model.norm.weight");
  for (int l = 0; l < config_.n_layers; ++l) {
    LayerWeights& w = views_.layers[l];
    auto layer = [&](const char* suffix) { return view(layer_param_name(l, suffix)); };
    w.attn_norm = layer("input_layernorm.weight");
    w.wq = layer("self_attn.q_proj.weight");
    w.wk = layer("self_attn.k_proj.weight");
    w.wv = layer("self_attn.v_proj.weight");
    if (config_.attention_bias) {
      w.bq = layer("self_attn.q_proj.bias");
      w.bk = layer("self_attn.k_proj.bias");
      w.bv = layer("self_attn.v_proj.bias");
    }
    w.wo = layer("self_attn.o_proj.weight");
    w.mlp_norm = layer("post_attention_layernorm.weight");
    w.w_gate = layer("mlp.gate_proj.weight");
    w.w_up = layer("mlp.up_proj.weight");
    w.w_down = layer("mlp.down_proj.weight");
  }
}

Tensor FrozenBf16Base::tensor(int index) const {
  const ParameterInfo& info = layout_->params()[static_cast<size_t>(index)];
  if (!stored_in_bf16(info)) return f32_tensors_[index].as(DType::f32, info.shape);
  const Tensor group = bf16_groups_[info.group].as(DType::bf16,
                                                   Shape{layout_->group_numel(info.group)});
  return group.flat(info.offset, info.numel()).view(info.shape);
}

void FrozenBf16Base::set(int index, const float* host) {
  const Tensor t = tensor(index);
  const int64_t n = t.numel();
  if (t.dtype == DType::f32) {
    backend_->copy_from_host(t, host);
  } else {
    std::vector<uint16_t> rounded(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rounded[static_cast<size_t>(i)] = float_to_bf16(host[i]);
    backend_->copy_from_host(t, rounded.data());
  }
  if (index == layout_->index_of("model.embed_tokens.weight") && config_.tie_embeddings) {
    std::vector<uint16_t> rounded(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) rounded[static_cast<size_t>(i)] = float_to_bf16(host[i]);
    backend_->copy_from_host(views_.lm_head, rounded.data());
  }
}

void FrozenBf16Base::get(int index, float* host) const {
  const Tensor t = tensor(index);
  const int64_t n = t.numel();
  if (t.dtype == DType::f32) {
    backend_->copy_to_host(host, t);
    return;
  }
  std::vector<uint16_t> raw(static_cast<size_t>(n));
  backend_->copy_to_host(raw.data(), t);
  for (int64_t i = 0; i < n; ++i) host[i] = bf16_to_float(raw[static_cast<size_t>(i)]);
}

size_t FrozenBf16Base::bytes() const {
  size_t total = 0;
  for (const Buffer& b : bf16_groups_) total += b.bytes();
  for (const Buffer& b : f32_tensors_) total += b.bytes();
  return total;
}

}  // namespace anvil
