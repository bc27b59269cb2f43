// The one declarative list of a Llama model's parameters. Each row says everything the rest of
// anvil needs to know about one tensor: its Hugging Face name, its shape as a function of the
// config, its role, when it exists, its weight-decay class and init rule, whether LoRA may wrap
// it (and under which PEFT module name), its tensor-parallel split and the LayerWeights /
// LlamaWeights field that views it. The layout, the views, initialisation, Hugging Face load
// and save, PEFT names and LoRA target validation all read these rows, so nothing else lists
// parameters and a new family's tensor is one more row. Rows are in layout order: the embedding
// group, then one transformer layer, then the head group.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama_config.h"
#include "model/llama_parameters.h"

namespace anvil {

// Which group a row's tensor lives in: kEmbeddingGroup, layer_group(l) for every layer, or
// head_group(config).
enum class ParamScope : uint8_t { embedding, layer, head };

// What a tensor does in the forward pass.
enum class ParamRole : uint8_t {
  embedding,
  attn_norm,
  q,
  k,
  v,
  q_bias,
  k_bias,
  v_bias,
  o,
  mlp_norm,
  gate,
  up,
  down,
  final_norm,
  head,
};

// When a row is part of a config's model.
enum class ParamCondition : uint8_t {
  always,
  attention_bias,  // only with config.attention_bias (Qwen2)
  untied_head,     // only when !config.tie_embeddings (a tied head reads the embedding table)
};

// Which weight-decay flag a tensor gets.
enum class DecayClass : uint8_t {
  matrix,      // always decays
  no_decay,    // norms and biases never decay
  embedding,   // decays when decay_embeddings
};

// How init_llama_group fills a tensor.
enum class InitRule : uint8_t {
  normal,           // normal(0, 0.02)
  residual_normal,  // normal(0, 0.02 / sqrt(2 * n_layers)): projections into the residual stream
  ones,
  zeros,
};

// How tensor parallelism splits a tensor across ranks.
enum class TpSplit : uint8_t {
  column,      // the output dimension (rows of an (out, in) matrix; a bias of such a matrix)
  row,         // the input dimension (columns of an (out, in) matrix)
  vocabulary,  // the vocabulary dimension of the embedding table and the lm head
  replicated,  // every rank holds it whole
};

// Returns the dimension a split cuts (ParameterInfo::split_dim): 0 for column and vocabulary,
// 1 for row, -1 for replicated.
int tp_split_dim(TpSplit split);

// One extent of a shape, named after the config field it comes from.
enum class Extent : uint8_t { none, dim, q_dim, kv_dim, ffn_dim, vocab };

struct ParamRow {
  const char* name;     // anvil's short name, e.g. "wq"
  const char* hf_name;  // per layer: the part after "model.layers.N."; otherwise the full name
  ParamScope scope;
  ParamRole role;
  std::array<Extent, 2> shape;  // (out, in) of a matrix; {extent, none} of a vector
  ParamCondition condition;
  DecayClass decay;
  InitRule init;
  const char* lora_target;  // PEFT module name LoRA may wrap ("q_proj"), or "" when it may not
  TpSplit tp_split;
  Tensor LayerWeights::*layer_field;  // the view of a per-layer row; nullptr for the others
  Tensor LlamaWeights::*model_field;  // the view of an embedding/head row; nullptr for layer rows
};

// Returns every row, in layout order.
std::span<const ParamRow> llama_param_rows();
// Returns whether a row is part of `config`'s model.
bool param_row_applies(const ParamRow& row, const LlamaConfig& config);
// Returns the rows of `config`'s model, in layout order.
std::vector<const ParamRow*> llama_param_rows(const LlamaConfig& config);
// Returns the row of a role (every role has exactly one row).
const ParamRow& param_row(ParamRole role);
// Returns the Hugging Face name of a row's tensor; `layer` is used by per-layer rows only:
// hf_param_name(param_row(ParamRole::q), 3) is "model.layers.3.self_attn.q_proj.weight".
std::string hf_param_name(const ParamRow& row, int layer);
// Returns the group that holds a row's tensor (for layer `layer` when per layer).
int param_group(const ParamRow& row, const LlamaConfig& config, int layer);
// Returns a row's shape for `config`.
Shape param_shape(const ParamRow& row, const LlamaConfig& config);
// Returns the (out, in) dims of a matrix row for `config`; throws for a vector row.
std::array<int64_t, 2> param_dims(const ParamRow& row, const LlamaConfig& config);

// Returns the PEFT module names LoRA may target, in table order (the adapter layout order).
const std::vector<std::string>& lora_module_names();
// Returns the rows LoRA may target, in table order.
const std::vector<const ParamRow*>& lora_target_rows();
// Returns the row a PEFT module name wraps; throws "[lora] unknown target 'x' (valid: ...)"
// listing lora_module_names() for any other name, a parameter LoRA may not wrap included.
const ParamRow& lora_target_row(std::string_view module_name);
// Returns the module names of the attention projections, anvil's default LoRA targets.
std::vector<std::string> default_lora_targets();

}  // namespace anvil
