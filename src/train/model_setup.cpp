// LlamaConfig mapping and optimizer group construction (see model_setup.h).
#include "train/model_setup.h"

#include <algorithm>

namespace anvil {

LlamaConfig llama_config_from(const ModelConfigSection& model) {
  LlamaConfig config;
  config.dim = static_cast<int>(model.dim);
  config.n_layers = static_cast<int>(model.n_layers);
  config.n_heads = static_cast<int>(model.n_heads);
  config.n_kv_heads = static_cast<int>(model.n_kv_heads);
  config.head_dim = static_cast<int>(model.head_dim);
  config.ffn_dim = static_cast<int>(model.ffn_dim);
  config.vocab_size = static_cast<int>(model.vocab_size);
  config.max_seq_len = static_cast<int>(model.max_seq_len);
  config.rope_theta = static_cast<float>(model.rope_theta);
  config.norm_eps = static_cast<float>(model.norm_eps);
  config.tie_embeddings = model.tie_embeddings;
  config.attention_bias = model.attention_bias;
  return config;
}

std::vector<OptimizerGroup> optimizer_groups_for(LlamaModel& model) {
  const ParameterLayout& layout = model.parameters().layout();
  std::vector<OptimizerGroup> groups(static_cast<size_t>(layout.group_count()));
  for (int g = 0; g < layout.group_count(); ++g) {
    groups[g].params = model.parameters().group(g);
    groups[g].grads = model.gradients().group(g);
  }
  std::vector<const ParameterInfo*> params;
  for (const ParameterInfo& info : layout.params()) params.push_back(&info);
  std::stable_sort(params.begin(), params.end(),
                   [](const ParameterInfo* a, const ParameterInfo* b) {
                     return a->group != b->group ? a->group < b->group : a->offset < b->offset;
                   });
  for (size_t i = 0; i < params.size(); ++i) {
    const ParameterInfo& info = *params[i];
    const bool last_in_group = i + 1 == params.size() || params[i + 1]->group != info.group;
    const int64_t end = last_in_group ? layout.group_numel(info.group) : params[i + 1]->offset;
    std::vector<ParamSpan>& spans = groups[static_cast<size_t>(info.group)].spans;
    if (spans.empty() && info.offset > 0) spans.push_back({0, info.offset, false});
    if (!spans.empty() && spans.back().weight_decay == info.weight_decay) {
      spans.back().count = end - spans.back().offset;
    } else {
      spans.push_back({info.offset, end - info.offset, info.weight_decay});
    }
  }
  return groups;
}

AdamWHyperParams adamw_hyper_params_from(const OptimizerConfigSection& optimizer) {
  AdamWHyperParams hyper;
  hyper.beta1 = optimizer.beta1;
  hyper.beta2 = optimizer.beta2;
  hyper.eps = optimizer.eps;
  hyper.weight_decay = optimizer.weight_decay;
  return hyper;
}

}  // namespace anvil
