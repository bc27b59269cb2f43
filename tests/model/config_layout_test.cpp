// LlamaConfig validation and counts, the Hugging Face parameter layout (names, shapes, groups,
// alignment, decay flags) and ParameterSet views.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/llama_config.h"
#include "model/llama_parameters.h"
#include "model_test_util.h"

namespace anvil::test {
namespace {

void expect_invalid(const LlamaConfig& c, const std::string& fragment) {
  try {
    c.validate();
    ADD_FAILURE() << "expected an error mentioning " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[config]", 0), 0u) << e.what();
  }
}

TEST(LlamaConfigTest, ValidatesEveryField) {
  EXPECT_NO_THROW(tiny_config().validate());
  LlamaConfig c = tiny_config();
  c.dim = 0;
  expect_invalid(c, "dim");
  c = tiny_config();
  c.n_kv_heads = 3;
  expect_invalid(c, "multiple of n_kv_heads");
  c = tiny_config();
  c.n_heads = 5;
  c.n_kv_heads = 5;
  expect_invalid(c, "not divisible by n_heads");
  c.head_dim = 8;
  EXPECT_NO_THROW(c.validate());
  c.head_dim = 7;
  expect_invalid(c, "even");
  c = tiny_config();
  c.vocab_size = 0;
  expect_invalid(c, "vocab_size");
  c = tiny_config();
  c.norm_eps = 0.0f;
  expect_invalid(c, "norm_eps");
  c = tiny_config();
  c.rope_theta = -1.0f;
  expect_invalid(c, "rope_theta");
  c = tiny_config();
  c.rope_scaling_factor = 0.5f;
  expect_invalid(c, "rope_scaling_factor");
  c.rope_scaling_factor = 8.0f;
  c.rope_low_freq_factor = 4.0f;
  expect_invalid(c, "low_freq_factor");
  c = tiny_config();
  c.ffn_dim = -2;
  expect_invalid(c, "ffn_dim");
}

TEST(LlamaConfigTest, ResolvesHeadDimAndWidths) {
  LlamaConfig c = tiny_config();
  EXPECT_EQ(c.resolved_head_dim(), 8);
  EXPECT_EQ(c.q_dim(), 32);
  EXPECT_EQ(c.kv_dim(), 16);
  c.head_dim = 16;
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 32);
  const RopeParams rope = c.rope_params();
  EXPECT_EQ(rope.theta, c.rope_theta);
  EXPECT_EQ(rope.scaling_factor, 0.0f);
}

TEST(LlamaConfigTest, ParamCountMatchesTheLayout) {
  for (bool tied : {false, true}) {
    for (bool bias : {false, true}) {
      LlamaConfig c = tiny_config();
      c.tie_embeddings = tied;
      c.attention_bias = bias;
      EXPECT_EQ(c.param_count(), make_llama_layout(c, true)->total_params())
          << "tied=" << tied << " bias=" << bias;
    }
  }
  // Llama 3.2 1B: 1,235,814,400 parameters (tied embeddings), as published.
  LlamaConfig llama32;
  llama32.dim = 2048;
  llama32.n_layers = 16;
  llama32.n_heads = 32;
  llama32.n_kv_heads = 8;
  llama32.ffn_dim = 8192;
  llama32.vocab_size = 128256;
  llama32.max_seq_len = 131072;
  llama32.tie_embeddings = true;
  EXPECT_EQ(llama32.param_count(), 1235814400);
}

TEST(LlamaConfigTest, FlopsPerTokenFollowsTheStatedFormula) {
  const LlamaConfig c = tiny_config();
  // Per layer: q 32x32, k 16x32, v 16x32, o 32x32, gate/up/down 3 x 48x32; head 64x32.
  const int64_t per_layer = 32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 48 * 32;
  const int64_t matmul_params = 2 * per_layer + 64 * 32;
  EXPECT_EQ(c.matmul_param_count(), matmul_params);
  const int seq = 16;
  EXPECT_DOUBLE_EQ(c.flops_per_token(seq), 6.0 * matmul_params + 12.0 * 2 * seq * 32);
}

TEST(LlamaConfigTest, WeightsSummaryLeavesOutOnlyThePositions) {
  const LlamaConfig base = tiny_config();
  LlamaConfig longer = base;
  longer.max_seq_len = 4 * base.max_seq_len;
  longer.rope_theta = 500000.0f;
  longer.rope_scaling_factor = 8.0f;
  // Continued pretraining at a longer context keeps the weights: same weight summary.
  EXPECT_EQ(longer.weights_summary(), base.weights_summary());
  EXPECT_NE(longer.summary(), base.summary());
  EXPECT_EQ(longer.position_changes_from(base),
            "max_seq_len 32 -> 128, rope_theta 10000 -> 500000, rope_scaling_factor 0 -> 8");
  EXPECT_EQ(base.position_changes_from(base), "");
  // The other scaling keys are named only while scaling is on somewhere.
  LlamaConfig low = base;
  low.rope_low_freq_factor = 2.0f;
  EXPECT_EQ(low.position_changes_from(base), "");
  low.rope_scaling_factor = 8.0f;
  EXPECT_EQ(low.position_changes_from(base),
            "rope_scaling_factor 0 -> 8, rope_low_freq_factor 1 -> 2");
  // Anything that shapes a weight still differs.
  const std::vector<void (*)(LlamaConfig&)> changes = {
      [](LlamaConfig& c) { c.dim = 64; },
      [](LlamaConfig& c) { c.n_kv_heads = 4; },
      [](LlamaConfig& c) { c.ffn_dim = 64; },
      [](LlamaConfig& c) { c.vocab_size = 65; },
      [](LlamaConfig& c) { c.tie_embeddings = !c.tie_embeddings; },
      [](LlamaConfig& c) { c.attention_bias = true; }};
  for (auto change : changes) {
    LlamaConfig other = base;
    change(other);
    EXPECT_NE(other.weights_summary(), base.weights_summary()) << other.summary();
  }
}

TEST(LlamaLayoutTest, UsesHuggingFaceNamesShapesAndGroups) {
  LlamaConfig c = tiny_config();
  c.head_dim = 16;
  const auto layout = make_llama_layout(c, true);
  EXPECT_EQ(layout->group_count(), c.n_layers + 2);
  const auto& p = layout->params();
  EXPECT_EQ(p.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(p.front().shape, (Shape{64, 32}));
  EXPECT_EQ(p.front().group, kEmbeddingGroup);
  const ParameterInfo& q = p[layout->index_of("model.layers.1.self_attn.q_proj.weight")];
  EXPECT_EQ(q.shape, (Shape{64, 32}));  // (out, in) with head_dim 16
  EXPECT_EQ(q.group, layer_group(1));
  EXPECT_EQ(p[layout->index_of("model.layers.0.self_attn.k_proj.weight")].shape, (Shape{32, 32}));
  EXPECT_EQ(p[layout->index_of("model.layers.0.self_attn.o_proj.weight")].shape, (Shape{32, 64}));
  EXPECT_EQ(p[layout->index_of("model.layers.0.mlp.down_proj.weight")].shape, (Shape{32, 48}));
  EXPECT_EQ(p[layout->index_of("model.layers.0.mlp.gate_proj.weight")].shape, (Shape{48, 32}));
  EXPECT_EQ(p[layout->index_of("model.norm.weight")].group, head_group(c));
  EXPECT_EQ(p[layout->index_of("lm_head.weight")].group, head_group(c));
  EXPECT_EQ(layout->find("model.layers.0.self_attn.q_proj.bias"), -1);
  EXPECT_THROW(layout->index_of("model.layers.9.mlp.up_proj.weight"), Error);
  // Every tensor is aligned and tensors of a group never overlap.
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].offset % kParameterAlignment, 0) << p[i].name;
    EXPECT_LE(p[i].offset + p[i].numel(), layout->group_numel(p[i].group));
    if (i > 0 && p[i - 1].group == p[i].group) {
      EXPECT_GE(p[i].offset, p[i - 1].offset + p[i - 1].numel());
    }
  }
}

TEST(LlamaLayoutTest, TiedBiasAndDecayFlags) {
  LlamaConfig c = tiny_config();
  c.tie_embeddings = true;
  c.attention_bias = true;
  const auto layout = make_llama_layout(c, false);
  EXPECT_EQ(layout->find("lm_head.weight"), -1);
  std::set<std::string> no_decay;
  for (const ParameterInfo& info : layout->params()) {
    if (!info.weight_decay) no_decay.insert(info.name);
  }
  EXPECT_TRUE(no_decay.count("model.embed_tokens.weight"));
  EXPECT_TRUE(no_decay.count("model.layers.1.self_attn.v_proj.bias"));
  EXPECT_TRUE(no_decay.count("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_TRUE(no_decay.count("model.norm.weight"));
  EXPECT_FALSE(no_decay.count("model.layers.0.self_attn.q_proj.weight"));
  // 1 embedding + per layer 2 norms + 3 biases + the final norm.
  EXPECT_EQ(no_decay.size(), 1u + 2u * 5u + 1u);
  const auto decayed = make_llama_layout(c, true);
  EXPECT_TRUE(decayed->params()[decayed->index_of("model.embed_tokens.weight")].weight_decay);
}

TEST(ParameterSetTest, GroupsAreFlatZeroedBuffersWithNamedViews) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = tiny_config();
  ParameterSet set(make_llama_layout(c, true), *backend,
                   MemoryCategory::trainable_weights);
  const ParameterLayout& layout = set.layout();
  for (int g = 0; g < set.group_count(); ++g) {
    const std::vector<float> values = to_host(*backend, set.group(g));
    EXPECT_EQ(static_cast<int64_t>(values.size()), layout.group_numel(g));
    for (float v : values) ASSERT_EQ(v, 0.0f);
  }
  const int index = layout.index_of("model.layers.0.mlp.up_proj.weight");
  const ParameterInfo& info = layout.params()[index];
  const Tensor view = set.tensor(info.name);
  EXPECT_EQ(view.shape, info.shape);
  EXPECT_EQ(static_cast<char*>(view.data),
            static_cast<char*>(set.group(info.group).data) + info.offset * sizeof(float));
  EXPECT_THROW(set.tensor("nope"), Error);
}

TEST(ParameterLayoutTest, RejectsDuplicatesAndOutOfOrderGroups) {
  ParameterLayout layout;
  layout.add("a", 0, Shape{3}, false);
  EXPECT_THROW(layout.add("a", 0, Shape{3}, false), Error);
  layout.add("b", 2, Shape{5}, true);
  EXPECT_EQ(layout.group_count(), 3);
  EXPECT_EQ(layout.group_numel(1), 0);
  EXPECT_EQ(layout.group_numel(0), kParameterAlignment);
  EXPECT_THROW(layout.add("c", 0, Shape{1}, false), Error);
}

}  // namespace
}  // namespace anvil::test
