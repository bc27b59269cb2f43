// Compute-dtype weight copies: one buffer per group with the master layout's offsets, so a
// master view at element offset o of its group maps to element o of the group's copy.
#include "model/compute_weights.h"

#include "core/error.h"

namespace anvil {

ComputeWeights::ComputeWeights(const LlamaConfig& config,
                               std::shared_ptr<const ParameterLayout> layout, Backend& backend,
                               DType dtype)
    : config_(config), layout_(std::move(layout)), backend_(&backend), dtype_(dtype) {
  for (int g = 0; g < layout_->group_count(); ++g)
    copies_.emplace_back(backend, static_cast<size_t>(layout_->group_numel(g)) * dtype_size(dtype),
                         MemoryCategory::workspace);
  views_.layers.resize(config_.n_layers);
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

}  // namespace anvil
