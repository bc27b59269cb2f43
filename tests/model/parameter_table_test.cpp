// The parameter table: the layout it builds carries exactly the tensor names (in order) that
// transformers' LlamaForCausalLM / Qwen2ForCausalLM state dicts hold, the views it links are the
// tensors of those names, LoRA targets wrap matrices of the right shape, tensor-parallel splits
// are the ones the tensor-parallel plan expects, and LoRA target errors list every valid name.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/llama_parameters.h"
#include "model/lora.h"
#include "model/parameter_table.h"
#include "model_test_util.h"

namespace anvil::test {
namespace {

// Returns a Qwen2-style config: q/k/v biases, untied head, head_dim 16 so q_dim != dim.
LlamaConfig biased_untied_config() {
  LlamaConfig c = tiny_config();
  c.head_dim = 16;
  c.attention_bias = true;
  c.tie_embeddings = false;
  return c;
}

std::vector<std::string> layout_names(const ParameterLayout& layout) {
  std::vector<std::string> names;
  for (const ParameterInfo& info : layout.params()) names.push_back(info.name);
  return names;
}

// Returns the message of the error `f` throws (fails the test when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

TEST(ParameterTableTest, LayoutHasTheHuggingFaceStateDictNamesInOrder) {
  const LlamaConfig c = biased_untied_config();
  // state_dict() order of Qwen2ForCausalLM with 2 layers (LlamaForCausalLM without the biases).
  std::vector<std::string> expected = {"model.embed_tokens.weight"};
  for (const std::string layer : {"0", "1"}) {
    const std::string p = "model.layers." + layer + ".";
    for (const char* suffix :
         {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias",
          "self_attn.v_proj.bias", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      expected.push_back(p + suffix);
  }
  expected.push_back("model.norm.weight");
  expected.push_back("lm_head.weight");
  const auto layout = make_llama_layout(c, true);
  EXPECT_EQ(layout_names(*layout), expected);

  // Shapes as (out, in), and the decay flags: matrices and the embedding decay, the rest not.
  const std::map<std::string, Shape> shapes = {
      {"model.embed_tokens.weight", Shape{64, 32}},
      {"model.layers.1.input_layernorm.weight", Shape{32}},
      {"model.layers.1.self_attn.q_proj.weight", Shape{64, 32}},
      {"model.layers.1.self_attn.k_proj.weight", Shape{32, 32}},
      {"model.layers.1.self_attn.v_proj.weight", Shape{32, 32}},
      {"model.layers.1.self_attn.q_proj.bias", Shape{64}},
      {"model.layers.1.self_attn.k_proj.bias", Shape{32}},
      {"model.layers.1.self_attn.v_proj.bias", Shape{32}},
      {"model.layers.1.self_attn.o_proj.weight", Shape{32, 64}},
      {"model.layers.1.post_attention_layernorm.weight", Shape{32}},
      {"model.layers.1.mlp.gate_proj.weight", Shape{48, 32}},
      {"model.layers.1.mlp.up_proj.weight", Shape{48, 32}},
      {"model.layers.1.mlp.down_proj.weight", Shape{32, 48}},
      {"model.norm.weight", Shape{32}},
      {"lm_head.weight", Shape{64, 32}},
  };
  for (const auto& [name, shape] : shapes) {
    const ParameterInfo& info = layout->params()[layout->index_of(name)];
    EXPECT_EQ(info.shape, shape) << name;
    EXPECT_EQ(info.weight_decay, shape.rank() == 2) << name;
  }
}

TEST(ParameterTableTest, TiedHeadAndNoBiasDropTheirRows) {
  LlamaConfig c = biased_untied_config();
  c.tie_embeddings = true;
  const std::vector<std::string> tied = layout_names(*make_llama_layout(c, true));
  EXPECT_EQ(tied.back(), "model.norm.weight");
  EXPECT_EQ(std::count(tied.begin(), tied.end(), "lm_head.weight"), 0);
  EXPECT_EQ(tied.size(), 1u + 2u * 12u + 1u);

  c.attention_bias = false;
  const auto plain = make_llama_layout(c, true);
  EXPECT_EQ(plain->params().size(), 1u + 2u * 9u + 1u);
  EXPECT_EQ(plain->find("model.layers.0.self_attn.q_proj.bias"), -1);
  EXPECT_EQ(c.param_count(), plain->total_params());
}

TEST(ParameterTableTest, ViewsAreTheTensorsOfTheirNames) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = biased_untied_config();
  ParameterSet set(make_llama_layout(c, true), *backend,
                   MemoryCategory::trainable_weights);
  const LlamaWeights w = llama_weight_views(c, set);
  auto same_tensor = [&](const Tensor& view, const std::string& name) {
    const Tensor named = set.tensor(name);
    return view.data == named.data && view.shape == named.shape;
  };
  EXPECT_TRUE(same_tensor(w.embedding, "model.embed_tokens.weight"));
  EXPECT_TRUE(same_tensor(w.final_norm, "model.norm.weight"));
  EXPECT_TRUE(same_tensor(w.lm_head, "lm_head.weight"));
  const LayerWeights& l1 = w.layers[1];
  const std::string p = "model.layers.1.";
  EXPECT_TRUE(same_tensor(l1.attn_norm, p + "input_layernorm.weight"));
  EXPECT_TRUE(same_tensor(l1.wq, p + "self_attn.q_proj.weight"));
  EXPECT_TRUE(same_tensor(l1.wk, p + "self_attn.k_proj.weight"));
  EXPECT_TRUE(same_tensor(l1.wv, p + "self_attn.v_proj.weight"));
  EXPECT_TRUE(same_tensor(l1.bq, p + "self_attn.q_proj.bias"));
  EXPECT_TRUE(same_tensor(l1.bk, p + "self_attn.k_proj.bias"));
  EXPECT_TRUE(same_tensor(l1.bv, p + "self_attn.v_proj.bias"));
  EXPECT_TRUE(same_tensor(l1.wo, p + "self_attn.o_proj.weight"));
  EXPECT_TRUE(same_tensor(l1.mlp_norm, p + "post_attention_layernorm.weight"));
  EXPECT_TRUE(same_tensor(l1.w_gate, p + "mlp.gate_proj.weight"));
  EXPECT_TRUE(same_tensor(l1.w_up, p + "mlp.up_proj.weight"));
  EXPECT_TRUE(same_tensor(l1.w_down, p + "mlp.down_proj.weight"));

  // A tied head views the embedding table; groups without storage get undefined views.
  LlamaConfig tied = c;
  tied.tie_embeddings = true;
  ParameterSet tied_set(make_llama_layout(tied, true), *backend,
                        MemoryCategory::trainable_weights);
  EXPECT_EQ(llama_weight_views(tied, tied_set).lm_head.data, tied_set.tensor(0).data);
  ParameterSet unbound(make_llama_layout(c, true), *backend,
                       MemoryCategory::trainable_weights, false);
  const LlamaWeights empty = llama_weight_views(c, unbound);
  EXPECT_FALSE(empty.embedding.defined());
  EXPECT_FALSE(empty.layers[0].wq.defined());
  EXPECT_FALSE(empty.layers[0].bq.defined());
  EXPECT_FALSE(empty.lm_head.defined());
}

TEST(ParameterTableTest, LoraTargetsWrapMatricesOfTheirShape) {
  const LlamaConfig c = biased_untied_config();
  const auto layout = make_llama_layout(c, true);
  const std::vector<std::string> expected = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
  EXPECT_EQ(lora_module_names(), expected);
  const auto& names = lora_target_names();
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.end()), expected);
  EXPECT_EQ(default_lora_targets(),
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  for (size_t i = 0; i < expected.size(); ++i) {
    const LoraTarget target = parse_lora_target(expected[i]);
    EXPECT_EQ(static_cast<size_t>(target), i);
    const std::string wrapped = hf_param_name(lora_target_row(expected[i]), 1);
    const Shape shape = layout->params()[layout->index_of(wrapped)].shape;
    const auto [out, in] = lora_target_dims(c, target);
    EXPECT_EQ(shape, (Shape{out, in})) << wrapped;
    // The adapter names are the wrapped module's path with lora_A / lora_B.
    const std::string module = wrapped.substr(0, wrapped.size() - std::string(".weight").size());
    EXPECT_EQ(lora_param_name(1, expected[i], 'A'), module + ".lora_A.weight");
    EXPECT_EQ(lora_param_name(1, expected[i], 'B'), module + ".lora_B.weight");
  }
  EXPECT_EQ(lora_param_name(3, "q_proj", 'A'), "model.layers.3.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(lora_param_name(0, "down_proj", 'B'), "model.layers.0.mlp.down_proj.lora_B.weight");
}

TEST(ParameterTableTest, TensorParallelSplits) {
  const std::map<ParamRole, TpSplit> expected = {
      {ParamRole::embedding, TpSplit::vocabulary}, {ParamRole::attn_norm, TpSplit::replicated},
      {ParamRole::q, TpSplit::column},             {ParamRole::k, TpSplit::column},
      {ParamRole::v, TpSplit::column},             {ParamRole::q_bias, TpSplit::column},
      {ParamRole::k_bias, TpSplit::column},        {ParamRole::v_bias, TpSplit::column},
      {ParamRole::o, TpSplit::row},                {ParamRole::mlp_norm, TpSplit::replicated},
      {ParamRole::gate, TpSplit::column},          {ParamRole::up, TpSplit::column},
      {ParamRole::down, TpSplit::row},             {ParamRole::final_norm, TpSplit::replicated},
      {ParamRole::head, TpSplit::vocabulary},
  };
  EXPECT_EQ(llama_param_rows().size(), expected.size());
  for (const ParamRow& row : llama_param_rows()) {
    ASSERT_EQ(expected.count(row.role), 1u) << row.name;
    EXPECT_EQ(row.tp_split, expected.at(row.role)) << row.name;
    EXPECT_EQ(&param_row(row.role), &row) << row.name;
  }
}

TEST(ParameterTableTest, UnknownLoraTargetListsEveryValidName) {
  const std::string valid =
      "(valid: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)";
  const std::string unknown = error_of([] { parse_lora_target("qkv_proj"); });
  EXPECT_NE(unknown.find("[lora] unknown target 'qkv_proj' " + valid), std::string::npos)
      << unknown;
  // Parameters of the table that LoRA may not wrap are rejected the same way, whether given by
  // anvil name, Hugging Face module name or full name.
  for (const char* name : {"embed_tokens", "input_layernorm", "post_attention_layernorm",
                           "lm_head", "norm", "wq", "self_attn.q_proj", "q_proj.bias"}) {
    const std::string message = error_of([&] { lora_target_row(name); });
    EXPECT_NE(message.find("unknown target '" + std::string(name) + "' " + valid),
              std::string::npos)
        << message;
  }
  LoraOptions options;
  options.r = 4;
  options.targets = {"q_proj", "embed_tokens"};
  const std::string from_options = error_of([&] { validate_lora_options(options); });
  EXPECT_NE(from_options.find(valid), std::string::npos) << from_options;
}

}  // namespace
}  // namespace anvil::test
