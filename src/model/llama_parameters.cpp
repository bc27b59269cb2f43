// The Llama layout (names, shapes, groups, decay flags), weight views and initialisation.
// Names and shapes follow transformers' LlamaForCausalLM / Qwen2ForCausalLM state dicts.
#include "model/llama_parameters.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "core/error.h"
#include "model/random.h"

namespace anvil {

namespace {

constexpr double kInitStd = 0.02;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

std::string layer_param_name(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::shared_ptr<const ParameterLayout> make_llama_layout(const LlamaConfig& config,
                                                         bool decay_embeddings) {
  config.validate();
  const int64_t c = config.dim, q = config.q_dim(), kv = config.kv_dim(), f = config.ffn_dim;
  const int64_t v = config.vocab_size;
  auto layout = std::make_shared<ParameterLayout>();
  layout->add("model.embed_tokens.weight", kEmbeddingGroup, Shape{v, c}, decay_embeddings);
  for (int l = 0; l < config.n_layers; ++l) {
    const int g = layer_group(l);
    layout->add(layer_param_name(l, "input_layernorm.weight"), g, Shape{c}, false);
    layout->add(layer_param_name(l, "self_attn.q_proj.weight"), g, Shape{q, c}, true);
    layout->add(layer_param_name(l, "self_attn.k_proj.weight"), g, Shape{kv, c}, true);
    layout->add(layer_param_name(l, "self_attn.v_proj.weight"), g, Shape{kv, c}, true);
    if (config.attention_bias) {
      layout->add(layer_param_name(l, "self_attn.q_proj.bias"), g, Shape{q}, false);
      layout->add(layer_param_name(l, "self_attn.k_proj.bias"), g, Shape{kv}, false);
      layout->add(layer_param_name(l, "self_attn.v_proj.bias"), g, Shape{kv}, false);
    }
    layout->add(layer_param_name(l, "self_attn.o_proj.weight"), g, Shape{c, q}, true);
    layout->add(layer_param_name(l, "post_attention_layernorm.weight"), g, Shape{c}, false);
    layout->add(layer_param_name(l, "mlp.gate_proj.weight"), g, Shape{f, c}, true);
    layout->add(layer_param_name(l, "mlp.up_proj.weight"), g, Shape{f, c}, true);
    layout->add(layer_param_name(l, "mlp.down_proj.weight"), g, Shape{c, f}, true);
  }
  layout->add("model.norm.weight", head_group(config), Shape{c}, false);
  if (!config.tie_embeddings) layout->add("lm_head.weight", head_group(config), Shape{v, c}, true);
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
  auto view = [&](const std::string& name) { return present ? set.tensor(name) : Tensor(); };
  if (group == kEmbeddingGroup) {
    w.embedding = view("model.embed_tokens.weight");
    if (config.tie_embeddings) w.lm_head = w.embedding;
    return;
  }
  if (group == head_group(config)) {
    w.final_norm = view("model.norm.weight");
    if (!config.tie_embeddings) w.lm_head = view("lm_head.weight");
    return;
  }
  const int l = group - layer_group(0);
  ANVIL_CHECK(l >= 0 && l < config.n_layers, "[params] group {} is not a Llama group", group);
  LayerWeights& lw = w.layers[l];
  auto get = [&](const char* suffix) { return view(layer_param_name(l, suffix)); };
  lw.attn_norm = get("input_layernorm.weight");
  lw.wq = get("self_attn.q_proj.weight");
  lw.wk = get("self_attn.k_proj.weight");
  lw.wv = get("self_attn.v_proj.weight");
  if (config.attention_bias) {
    lw.bq = get("self_attn.q_proj.bias");
    lw.bk = get("self_attn.k_proj.bias");
    lw.bv = get("self_attn.v_proj.bias");
  }
  lw.wo = get("self_attn.o_proj.weight");
  lw.mlp_norm = get("post_attention_layernorm.weight");
  lw.w_gate = get("mlp.gate_proj.weight");
  lw.w_up = get("mlp.up_proj.weight");
  lw.w_down = get("mlp.down_proj.weight");
}

void init_llama_group(const LlamaConfig& config, const ParameterLayout& layout, int group,
                      uint64_t seed, float* host) {
  const double residual_scale = 1.0 / std::sqrt(2.0 * config.n_layers);
  std::fill(host, host + layout.group_numel(group), 0.0f);
  for (const ParameterInfo& p : layout.params()) {
    if (p.group != group) continue;
    float* out = host + p.offset;
    if (ends_with(p.name, "norm.weight")) {
      std::fill(out, out + p.numel(), 1.0f);
    } else if (ends_with(p.name, ".bias")) {
      std::fill(out, out + p.numel(), 0.0f);
    } else {
      const bool residual_output =
          ends_with(p.name, "o_proj.weight") || ends_with(p.name, "down_proj.weight");
      const double stddev = kInitStd * (residual_output ? residual_scale : 1.0);
      fill_normal(out, p.numel(), stddev, seed, fnv1a64(p.name));
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
