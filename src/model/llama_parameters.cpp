// The Llama layout (names, shapes, groups, decay flags), weight views and initialisation, all
// read from the parameter table (parameter_table.h): this file lists no parameter itself.
#include "model/llama_parameters.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/parameter_table.h"
#include "model/random.h"

namespace anvil {

namespace {

constexpr double kInitStd = 0.02;

// Returns the scope of the rows that live in `group`, and sets `layer` to the layer of a layer
// group (0 for the others).
ParamScope scope_of_group(const LlamaConfig& config, int group, int& layer) {
  layer = 0;
  if (group == kEmbeddingGroup) return ParamScope::embedding;
  if (group == head_group(config)) return ParamScope::head;
  layer = group - layer_group(0);
  ANVIL_CHECK(layer >= 0 && layer < config.n_layers, "[params] group {} is not a Llama group",
              group);
  return ParamScope::layer;
}

}  // namespace

std::shared_ptr<const ParameterLayout> make_llama_layout(const LlamaConfig& config,
                                                         bool decay_embeddings) {
  config.validate();
  auto layout = std::make_shared<ParameterLayout>();
  auto add = [&](const ParamRow& row, int layer) {
    const bool decay = row.decay == DecayClass::matrix ||
                       (row.decay == DecayClass::embedding && decay_embeddings);
    layout->add(hf_param_name(row, layer), param_group(row, config, layer),
                param_shape(row, config), decay, tp_split_dim(row.tp_split));
  };
  // Groups are added in increasing order: the embedding group, each layer, the head group.
  const std::vector<const ParamRow*> rows = llama_param_rows(config);
  for (const ParamRow* row : rows)
    if (row->scope == ParamScope::embedding) add(*row, 0);
  for (int l = 0; l < config.n_layers; ++l)
    for (const ParamRow* row : rows)
      if (row->scope == ParamScope::layer) add(*row, l);
  for (const ParamRow* row : rows)
    if (row->scope == ParamScope::head) add(*row, 0);
  return layout;
}

LlamaWeights llama_weight_views(const LlamaConfig& config, const ParameterSet& set) {
  LlamaWeights w;
  w.layers.resize(config.n_layers);
  for (int g = 0; g < set.group_count(); ++g) refresh_group_views(config, set, g, w);
  return w;
}

void refresh_group_views(const LlamaConfig& config, const ParameterSet& set, int group,
                         LlamaWeights& w) {
  // A group without storage gets undefined views, so a stale pointer is never used.
  const bool present = set.has_storage(group);
  int layer = 0;
  const ParamScope scope = scope_of_group(config, group, layer);
  for (const ParamRow& row : llama_param_rows()) {
    if (row.scope != scope || !param_row_applies(row, config)) continue;
    const Tensor view = present ? set.tensor(hf_param_name(row, layer)) : Tensor();
    if (scope == ParamScope::layer) {
      w.layers[layer].*(row.layer_field) = view;
    } else {
      w.*(row.model_field) = view;
    }
  }
  if (group == kEmbeddingGroup && config.tie_embeddings) w.lm_head = w.embedding;
}

void init_llama_group(const LlamaConfig& config, const ParameterLayout& layout, int group,
                      uint64_t seed, float* host) {
  const double residual_scale = 1.0 / std::sqrt(2.0 * config.n_layers);
  std::fill(host, host + layout.group_numel(group), 0.0f);
  int layer = 0;
  const ParamScope scope = scope_of_group(config, group, layer);
  for (const ParamRow* row : llama_param_rows(config)) {
    if (row->scope != scope) continue;
    const ParameterInfo& p =
        layout.params()[static_cast<size_t>(layout.index_of(hf_param_name(*row, layer)))];
    float* out = host + p.offset;
    switch (row->init) {
      case InitRule::ones: std::fill(out, out + p.numel(), 1.0f); break;
      case InitRule::zeros: std::fill(out, out + p.numel(), 0.0f); break;
      case InitRule::normal: fill_normal(out, p.numel(), kInitStd, seed, fnv1a64(p.name)); break;
      case InitRule::residual_normal:
        fill_normal(out, p.numel(), kInitStd * residual_scale, seed, fnv1a64(p.name));
        break;
    }
  }
}

void init_llama_weights(const LlamaConfig& config, ParameterSet& set, Backend& backend,
                        uint64_t seed) {
  const ParameterLayout& layout = set.layout();
  for (int g = 0; g < layout.group_count(); ++g) {
    std::vector<float> host(static_cast<size_t>(layout.group_numel(g)));
    init_llama_group(config, layout, g, seed, host.data());
    backend.copy_from_host(set.group(g), host.data());
  }
}

}  // namespace anvil
