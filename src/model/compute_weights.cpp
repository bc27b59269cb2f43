// Compute-dtype weights: one buffer per group with the master layout's offsets, so a master
// view at element offset o of its group maps to element o of the group's copy; or, bound,
// the same offsets inside storage a parallel layer gathered.
#include "model/compute_weights.h"

#include <string>

#include "core/error.h"

namespace anvil {

ComputeWeights::ComputeWeights(const LlamaConfig& config,
                               std::shared_ptr<const ParameterLayout> layout, Backend& backend,
                               DType dtype, bool own_copies)
    : config_(config), layout_(std::move(layout)), backend_(&backend), dtype_(dtype) {
  if (own_copies) {
    for (int g = 0; g < layout_->group_count(); ++g)
      copies_.emplace_back(backend,
                           static_cast<size_t>(layout_->group_numel(g)) * dtype_size(dtype),
                           MemoryCategory::workspace);
  } else {
    bound_ = ParameterSet(layout_, backend, MemoryCategory::workspace, false, dtype);
    bound_views_ = llama_weight_views(config_, bound_);
  }
  views_.layers.resize(config_.n_layers);
}

ComputeParts ComputeWeights::parts(const LlamaConfig& config, const ParameterLayout& layout,
                                   int group) {
  ComputeParts parts;
  std::vector<std::string> names;
  if (group == kEmbeddingGroup) {
    names = {"model.embed_tokens.weight"};
    parts.reads_compute = config.tie_embeddings;  // the tied head's GEMM
    parts.all_f32 = true;
  } else if (group == head_group(config)) {
    names = {"model.norm.weight"};
    parts.reads_compute = !config.tie_embeddings;
    parts.all_f32 = config.tie_embeddings;  // the tied head group holds only the norm
  } else {
    const int l = group - layer_group(0);
    names = {layer_param_name(l, "input_layernorm.weight"),
             layer_param_name(l, "post_attention_layernorm.weight")};
    parts.reads_compute = true;
  }
  for (const std::string& name : names) {
    const int index = layout.index_of(name);
    const ParameterInfo& p = layout.params()[static_cast<size_t>(index)];
    parts.f32.push_back({index, p.offset, p.numel()});
    parts.f32_numel += p.numel();
  }
  return parts;
}

Tensor ComputeWeights::group(int group) const {
  const int64_t numel = layout_->group_numel(group);
  return copies_[group].as(dtype_, Shape{numel});
}

Tensor ComputeWeights::translate(const Tensor& t, const Tensor& master_group, int group) const {
  if (!t.defined()) return Tensor();
  const int64_t offset = (static_cast<const char*>(t.data) -
                          static_cast<const char*>(master_group.data)) /
                         static_cast<int64_t>(sizeof(float));
  ANVIL_CHECK(offset >= 0 && offset + t.numel() <= master_group.numel(),
              "[model] weight view lies outside its group {}", group);
  return this->group(group).flat(offset, t.numel()).view(t.shape);
}

void ComputeWeights::refresh(int group, const Tensor& master_group, const LlamaWeights& master,
                             bool cast) {
  if (cast) backend_->cast(master_group, this->group(group));
  if (group == kEmbeddingGroup) {
    views_.embedding = master.embedding;
    if (config_.tie_embeddings) views_.lm_head = translate(master.embedding, master_group, group);
    return;
  }
  if (group == head_group(config_)) {
    views_.final_norm = master.final_norm;
    if (!config_.tie_embeddings) views_.lm_head = translate(master.lm_head, master_group, group);
    return;
  }
  const int l = group - layer_group(0);
  const LayerWeights& m = master.layers[l];
  LayerWeights& w = views_.layers[l];
  w.attn_norm = m.attn_norm;
  w.mlp_norm = m.mlp_norm;
  for (auto field : {&LayerWeights::wq, &LayerWeights::wk, &LayerWeights::wv, &LayerWeights::bq,
                     &LayerWeights::bk, &LayerWeights::bv, &LayerWeights::wo,
                     &LayerWeights::w_gate, &LayerWeights::w_up, &LayerWeights::w_down})
    w.*field = translate(m.*field, master_group, group);
}

void ComputeWeights::bind(int group, const Tensor& compute, const Tensor& f32) {
  ANVIL_CHECK(!owns_copies(), "[model] compute weights with own copies cannot be bound");
  const ComputeParts p = parts(config_, *layout_, group);
  ANVIL_CHECK(f32.defined() && f32.dtype == DType::f32 && f32.numel() >= p.f32_numel,
              "[model] group {} needs {} f32 elements of packed norms bound", group, p.f32_numel);
  ANVIL_CHECK(compute.defined() == p.reads_compute,
              "[model] group {} {} compute-dtype weights", group,
              p.reads_compute ? "needs" : "reads no");
  bound_.bind(group, compute);
  refresh_group_views(config_, bound_, group, bound_views_);
  std::vector<Tensor> f32_views;
  int64_t packed = 0;
  for (const ComputeParts::Range& range : p.f32) {
    const Shape& shape = layout_->params()[static_cast<size_t>(range.param)].shape;
    f32_views.push_back(f32.flat(packed, range.length).view(shape));
    packed += range.length;
  }
  if (group == kEmbeddingGroup) {
    views_.embedding = f32_views[0];
    if (config_.tie_embeddings) views_.lm_head = bound_views_.embedding;
    return;
  }
  if (group == head_group(config_)) {
    views_.final_norm = f32_views[0];
    if (!config_.tie_embeddings) views_.lm_head = bound_views_.lm_head;
    return;
  }
  const int l = group - layer_group(0);
  LayerWeights& w = views_.layers[l];
  w = bound_views_.layers[l];
  w.attn_norm = f32_views[0];
  w.mlp_norm = f32_views[1];
}

}  // namespace anvil
