// The Llama parameter layout (Hugging Face names and shapes, Linear weights as (out, in)),
// the per-block weight views the forward/backward code reads, and weight initialisation.
// Groups: kEmbeddingGroup (0) holds model.embed_tokens.weight; group 1 + l holds layer l;
// the head group (n_layers + 1) holds model.norm.weight and lm_head.weight (absent when tied:
// the head then reads the embedding table of group 0). Every name, shape, flag and init rule
// here comes from the parameter table (parameter_table.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/llama_config.h"
#include "model/parameters.h"

namespace anvil {

inline constexpr int kEmbeddingGroup = 0;
// Returns the group that holds transformer layer `layer`.
inline int layer_group(int layer) { return 1 + layer; }
// Returns the group that holds the final norm and the lm head.
inline int head_group(const LlamaConfig& config) { return config.n_layers + 1; }

// Views of one transformer layer's tensors (weights or their gradients). Biases are
// undefined tensors unless config.attention_bias.
struct LayerWeights {
  Tensor attn_norm;     // (C)
  Tensor wq, wk, wv;    // (Hq*D, C), (Hkv*D, C), (Hkv*D, C)
  Tensor bq, bk, bv;    // (Hq*D), (Hkv*D), (Hkv*D)
  Tensor wo;            // (C, Hq*D)
  Tensor mlp_norm;      // (C)
  Tensor w_gate, w_up;  // (F, C)
  Tensor w_down;        // (C, F)
};

// Views of every tensor of a Llama model in one ParameterSet.
struct LlamaWeights {
  Tensor embedding;  // (V, C)
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // (C)
  Tensor lm_head;     // (V, C); the same view as `embedding` when tied
};

// Returns the name of a layer tensor: layer_param_name(3, "mlp.up_proj.weight") is
// "model.layers.3.mlp.up_proj.weight".
std::string layer_param_name(int layer, const char* suffix);

// Builds the layout of a validated config. Matrices decay; norms and biases do not; the
// embedding table decays when decay_embeddings (the lm head is a matrix and always decays).
std::shared_ptr<const ParameterLayout> make_llama_layout(const LlamaConfig& config,
                                                         bool decay_embeddings);

// Returns views of every tensor in a set built on make_llama_layout(config, ...); the
// tensors of groups without storage are left undefined.
LlamaWeights llama_weight_views(const LlamaConfig& config, const ParameterSet& set);

// Recomputes the views of one group's tensors after it was bound to other storage (group 0
// also refreshes a tied lm_head).
void refresh_group_views(const LlamaConfig& config, const ParameterSet& set, int group,
                         LlamaWeights& views);

// Initialises a set in place: matrices and embeddings ~ normal(0, 0.02), o_proj and
// down_proj additionally scaled by 1/sqrt(2 * n_layers), norms = 1, biases = 0. Each tensor
// draws from its own stream fnv1a64(name) of random.h's counter-based generator, so a value
// depends only on (seed, name, index).
void init_llama_weights(const LlamaConfig& config, ParameterSet& set, Backend& backend,
                        uint64_t seed);

// Writes the initial values of one group (layout().group_numel(group) floats, padding zero)
// into host memory, exactly as init_llama_weights would, so a sharded owner can initialise a
// group without the set holding it.
void init_llama_group(const LlamaConfig& config, const ParameterLayout& layout, int group,
                      uint64_t seed, float* host);

}  // namespace anvil
