// The Llama parameter rows and their accessors. Names and shapes follow transformers'
// LlamaForCausalLM / Qwen2ForCausalLM state dicts; the row order is the layout order, so a row
// moved here moves its tensor in every checkpoint anvil writes. The LoraTarget enum that the
// attention and MLP blocks use is checked against the LoRA rows at compile time.
#include "model/parameter_table.h"

#include <algorithm>

#include "core/error.h"
#include "model/llama_parameters.h"
#include "model/lora.h"

namespace anvil {

std::string layer_param_name(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

namespace {

using E = Extent;
using S = ParamScope;
using R = ParamRole;
using C = ParamCondition;
using D = DecayClass;
using I = InitRule;
using T = TpSplit;

// clang-format off
// Per row: name, Hugging Face name, scope, role;
//          shape, condition, decay, init;
//          LoRA module, tensor-parallel split, view field (per layer, whole model).
constexpr ParamRow kRows[] = {
    {"embedding",  "model.embed_tokens.weight",       S::embedding, R::embedding,
     {E::vocab, E::dim},   C::always,         D::embedding, I::normal,
     "",          T::vocabulary, nullptr,                  &LlamaWeights::embedding},
    {"attn_norm",  "input_layernorm.weight",          S::layer,     R::attn_norm,
     {E::dim, E::none},    C::always,         D::no_decay,  I::ones,
     "",          T::replicated, &LayerWeights::attn_norm, nullptr},
    {"wq",         "self_attn.q_proj.weight",         S::layer,     R::q,
     {E::q_dim, E::dim},   C::always,         D::matrix,    I::normal,
     "q_proj",    T::column,     &LayerWeights::wq,        nullptr},
    {"wk",         "self_attn.k_proj.weight",         S::layer,     R::k,
     {E::kv_dim, E::dim},  C::always,         D::matrix,    I::normal,
     "k_proj",    T::column,     &LayerWeights::wk,        nullptr},
    {"wv",         "self_attn.v_proj.weight",         S::layer,     R::v,
     {E::kv_dim, E::dim},  C::always,         D::matrix,    I::normal,
     "v_proj",    T::column,     &LayerWeights::wv,        nullptr},
    {"bq",         "self_attn.q_proj.bias",           S::layer,     R::q_bias,
     {E::q_dim, E::none},  C::attention_bias, D::no_decay,  I::zeros,
     "",          T::column,     &LayerWeights::bq,        nullptr},
    {"bk",         "self_attn.k_proj.bias",           S::layer,     R::k_bias,
     {E::kv_dim, E::none}, C::attention_bias, D::no_decay,  I::zeros,
     "",          T::column,     &LayerWeights::bk,        nullptr},
    {"bv",         "self_attn.v_proj.bias",           S::layer,     R::v_bias,
     {E::kv_dim, E::none}, C::attention_bias, D::no_decay,  I::zeros,
     "",          T::column,     &LayerWeights::bv,        nullptr},
    {"wo",         "self_attn.o_proj.weight",         S::layer,     R::o,
     {E::dim, E::q_dim},   C::always,         D::matrix,    I::residual_normal,
     "o_proj",    T::row,        &LayerWeights::wo,        nullptr},
    {"mlp_norm",   "post_attention_layernorm.weight", S::layer,     R::mlp_norm,
     {E::dim, E::none},    C::always,         D::no_decay,  I::ones,
     "",          T::replicated, &LayerWeights::mlp_norm,  nullptr},
    {"w_gate",     "mlp.gate_proj.weight",            S::layer,     R::gate,
     {E::ffn_dim, E::dim}, C::always,         D::matrix,    I::normal,
     "gate_proj", T::column,     &LayerWeights::w_gate,    nullptr},
    {"w_up",       "mlp.up_proj.weight",              S::layer,     R::up,
     {E::ffn_dim, E::dim}, C::always,         D::matrix,    I::normal,
     "up_proj",   T::column,     &LayerWeights::w_up,      nullptr},
    {"w_down",     "mlp.down_proj.weight",            S::layer,     R::down,
     {E::dim, E::ffn_dim}, C::always,         D::matrix,    I::residual_normal,
     "down_proj", T::row,        &LayerWeights::w_down,    nullptr},
    {"final_norm", "model.norm.weight",               S::head,      R::final_norm,
     {E::dim, E::none},    C::always,         D::no_decay,  I::ones,
     "",          T::replicated, nullptr,                  &LlamaWeights::final_norm},
    {"lm_head",    "lm_head.weight",                  S::head,      R::head,
     {E::vocab, E::dim},   C::untied_head,    D::matrix,    I::normal,
     "",          T::vocabulary, nullptr,                  &LlamaWeights::lm_head},
};
// clang-format on

constexpr bool same(const char* a, const char* b) {
  return std::string_view(a) == std::string_view(b);
}

constexpr bool lora_targetable(const ParamRow& row) { return row.lora_target[0] != '\0'; }

// Returns whether a LoRA row is a per-layer matrix whose Hugging Face name is
// "<path>.<lora_target>.weight": PEFT matches target_modules against the last component of the
// module path, and lora_param_name swaps ".weight" for ".lora_A.weight".
constexpr bool lora_row_is_well_formed(const ParamRow& row) {
  constexpr std::string_view kWeight = ".weight";
  const std::string_view hf_name = row.hf_name;
  const std::string_view target = row.lora_target;
  if (hf_name.size() < target.size() + kWeight.size() + 2) return false;
  const std::string_view module = hf_name.substr(0, hf_name.size() - kWeight.size());
  const bool named = hf_name.substr(module.size()) == kWeight &&
                     module.substr(module.size() - target.size()) == target &&
                     module[module.size() - target.size() - 1] == '.';
  return named && row.scope == S::layer && row.shape[1] != E::none;
}

// Returns whether the rows are grouped by scope in group order, each row has the view field
// of its scope, every role and name appears once and every LoRA row is well formed: what
// make_llama_layout, param_row and the LoRA names rely on.
constexpr bool rows_are_well_formed() {
  for (size_t i = 0; i < std::size(kRows); ++i) {
    const ParamRow& row = kRows[i];
    if (lora_targetable(row) && !lora_row_is_well_formed(row)) return false;
    if (i > 0 && row.scope < kRows[i - 1].scope) return false;
    if ((row.scope == S::layer) != (row.layer_field != nullptr)) return false;
    if ((row.scope == S::layer) == (row.model_field != nullptr)) return false;
    if (row.shape[0] == E::none) return false;
    for (size_t j = 0; j < i; ++j)
      if (kRows[j].role == row.role || same(kRows[j].name, row.name)) return false;
  }
  return true;
}
static_assert(rows_are_well_formed());


constexpr int count_lora_rows() {
  int count = 0;
  for (const ParamRow& row : kRows) count += lora_targetable(row) ? 1 : 0;
  return count;
}

// Returns the module name of the `index`-th LoRA row.
constexpr const char* lora_row_name(int index) {
  for (const ParamRow& row : kRows) {
    if (!lora_targetable(row)) continue;
    if (index-- == 0) return row.lora_target;
  }
  return "";
}

// LoraTarget indexes the adapter arrays of the blocks, so its order is the table's LoRA order.
static_assert(count_lora_rows() == kLoraTargetCount);
static_assert(same(lora_row_name(static_cast<int>(LoraTarget::q_proj)), "q_proj"));
static_assert(same(lora_row_name(static_cast<int>(LoraTarget::k_proj)), "k_proj"));
static_assert(same(lora_row_name(static_cast<int>(LoraTarget::v_proj)), "v_proj"));
static_assert(same(lora_row_name(static_cast<int>(LoraTarget::o_proj)), "o_proj"));
static_assert(same(lora_row_name(static_cast<int>(LoraTarget::gate_proj)), "gate_proj"));
static_assert(same(lora_row_name(static_cast<int>(LoraTarget::up_proj)), "up_proj"));
static_assert(same(lora_row_name(static_cast<int>(LoraTarget::down_proj)), "down_proj"));

int64_t extent_size(Extent extent, const LlamaConfig& config) {
  switch (extent) {
    case E::dim: return config.dim;
    case E::q_dim: return config.q_dim();
    case E::kv_dim: return config.kv_dim();
    case E::ffn_dim: return config.ffn_dim;
    case E::vocab: return config.vocab_size;
    case E::none: break;
  }
  ANVIL_FAIL("[params] extent {} has no size", static_cast<int>(extent));
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

int tp_split_dim(TpSplit split) {
  switch (split) {
    case TpSplit::column:
    case TpSplit::vocabulary:
      return 0;
    case TpSplit::row:
      return 1;
    case TpSplit::replicated:
      return -1;
  }
  return -1;
}

std::span<const ParamRow> llama_param_rows() { return kRows; }

bool param_row_applies(const ParamRow& row, const LlamaConfig& config) {
  switch (row.condition) {
    case C::always: return true;
    case C::attention_bias: return config.attention_bias;
    case C::untied_head: return !config.tie_embeddings;
  }
  return false;
}

std::vector<const ParamRow*> llama_param_rows(const LlamaConfig& config) {
  std::vector<const ParamRow*> rows;
  for (const ParamRow& row : kRows)
    if (param_row_applies(row, config)) rows.push_back(&row);
  return rows;
}

const ParamRow& param_row(ParamRole role) {
  for (const ParamRow& row : kRows)
    if (row.role == role) return row;
  ANVIL_FAIL("[params] no parameter row has role {}", static_cast<int>(role));
}

std::string hf_param_name(const ParamRow& row, int layer) {
  if (row.scope != S::layer) return row.hf_name;
  return layer_param_name(layer, row.hf_name);
}

int param_group(const ParamRow& row, const LlamaConfig& config, int layer) {
  switch (row.scope) {
    case S::embedding: return kEmbeddingGroup;
    case S::layer: return layer_group(layer);
    case S::head: return head_group(config);
  }
  ANVIL_FAIL("[params] row '{}' has no scope", row.name);
}

Shape param_shape(const ParamRow& row, const LlamaConfig& config) {
  if (row.shape[1] == E::none) return Shape{extent_size(row.shape[0], config)};
  return Shape{extent_size(row.shape[0], config), extent_size(row.shape[1], config)};
}

std::array<int64_t, 2> param_dims(const ParamRow& row, const LlamaConfig& config) {
  ANVIL_CHECK(row.shape[1] != E::none, "[params] '{}' is a vector, not an (out, in) matrix",
              row.name);
  return {extent_size(row.shape[0], config), extent_size(row.shape[1], config)};
}

const std::vector<std::string>& lora_module_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list;
    for (const ParamRow* row : lora_target_rows()) list.emplace_back(row->lora_target);
    return list;
  }();
  return names;
}

const std::vector<const ParamRow*>& lora_target_rows() {
  static const std::vector<const ParamRow*> rows = [] {
    std::vector<const ParamRow*> list;
    for (const ParamRow& row : kRows)
      if (lora_targetable(row)) list.push_back(&row);
    return list;
  }();
  return rows;
}

const ParamRow& lora_target_row(std::string_view module_name) {
  for (const ParamRow* row : lora_target_rows())
    if (module_name == row->lora_target) return *row;
  ANVIL_FAIL("[lora] unknown target '{}' (valid: {})", module_name, join(lora_module_names()));
}

std::vector<std::string> default_lora_targets() {
  std::vector<std::string> names;
  for (const ParamRow* row : lora_target_rows()) {
    const bool attention = row->role == R::q || row->role == R::k || row->role == R::v ||
                           row->role == R::o;
    if (attention) names.emplace_back(row->lora_target);
  }
  return names;
}

}  // namespace anvil
