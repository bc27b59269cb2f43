// Weight initialisation: deterministic for a seed, independent of the rest of the layout, and
// with the documented statistics (normal(0, 0.02), o/down scaled by 1/sqrt(2 L), norms 1,
// biases 0). Also checks the counter-based generator behind it.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "model/random.h"
#include "model_test_util.h"

namespace anvil::test {
namespace {

struct Moments {
  double mean = 0.0;
  double std = 0.0;
};

Moments moments(const std::vector<float>& values) {
  double sum = 0.0, sum_sq = 0.0;
  for (float v : values) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(values.size());
  const double mean = sum / n;
  return {mean, std::sqrt(sum_sq / n - mean * mean)};
}

LlamaConfig init_config() {
  LlamaConfig c = tiny_config();
  c.dim = 128;
  c.ffn_dim = 256;
  c.n_layers = 4;
  c.vocab_size = 512;
  c.attention_bias = true;
  return c;
}

std::vector<float> param_values(LlamaModel& model, const std::string& name) {
  return to_host(model.backend(), model.parameters().tensor(name));
}

TEST(InitTest, SameSeedSameBitsDifferentSeedDifferentValues) {
  auto backend = make_backend("cpu");
  ModelOptions options;
  options.max_seq = 8;
  LlamaModel a(init_config(), *backend, options), b(init_config(), *backend, options);
  a.init_weights(7);
  b.init_weights(7);
  for (int g = 0; g < a.parameters().group_count(); ++g) {
    EXPECT_TRUE(bitwise_equal(to_host(*backend, a.parameters().group(g)),
                              to_host(*backend, b.parameters().group(g))))
        << "group " << g;
  }
  b.init_weights(8);
  EXPECT_FALSE(bitwise_equal(param_values(a, "model.layers.0.mlp.up_proj.weight"),
                             param_values(b, "model.layers.0.mlp.up_proj.weight")));
  // Distinct tensors draw from distinct streams.
  const std::vector<float> gate = param_values(a, "model.layers.0.mlp.gate_proj.weight");
  const std::vector<float> up = param_values(a, "model.layers.0.mlp.up_proj.weight");
  EXPECT_NE(gate[0], up[0]);
}

TEST(InitTest, ValueDependsOnlyOnSeedNameAndIndex) {
  auto backend = make_backend("cpu");
  ModelOptions options;
  options.max_seq = 8;
  LlamaConfig deeper = init_config();
  deeper.n_layers = 6;
  deeper.tie_embeddings = true;
  LlamaModel a(init_config(), *backend, options), b(deeper, *backend, options);
  a.init_weights(3);
  b.init_weights(3);
  EXPECT_TRUE(bitwise_equal(param_values(a, "model.embed_tokens.weight"),
                            param_values(b, "model.embed_tokens.weight")));
  EXPECT_TRUE(bitwise_equal(param_values(a, "model.layers.2.self_attn.k_proj.weight"),
                            param_values(b, "model.layers.2.self_attn.k_proj.weight")));
}

TEST(InitTest, StatisticsFollowTheScheme) {
  auto backend = make_backend("cpu");
  ModelOptions options;
  options.max_seq = 8;
  const LlamaConfig c = init_config();
  LlamaModel model(c, *backend, options);
  model.init_weights(11);
  const double residual_std = 0.02 / std::sqrt(2.0 * c.n_layers);
  for (const ParameterInfo& info : model.parameters().layout().params()) {
    const std::vector<float> values = param_values(model, info.name);
    const Moments m = moments(values);
    const bool is_norm = info.name.find("norm.weight") != std::string::npos;
    const bool is_bias = info.name.find(".bias") != std::string::npos;
    const bool is_residual_out = info.name.find("o_proj") != std::string::npos ||
                                 info.name.find("down_proj") != std::string::npos;
    if (is_norm) {
      for (float v : values) ASSERT_EQ(v, 1.0f) << info.name;
    } else if (is_bias) {
      for (float v : values) ASSERT_EQ(v, 0.0f) << info.name;
    } else {
      const double want = is_residual_out ? residual_std : 0.02;
      // >= 16k samples: the sample std is within a few percent of the true one.
      EXPECT_NEAR(m.std, want, 0.05 * want) << info.name;
      EXPECT_NEAR(m.mean, 0.0, 0.05 * want) << info.name;
    }
  }
}

TEST(RandomTest, NormalsAreStandardAndCounterBased) {
  std::vector<float> values(200001);
  fill_normal(values.data(), static_cast<int64_t>(values.size()), 1.0, 42, 9);
  const Moments m = moments(values);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.std, 1.0, 0.01);
  size_t beyond_two_sigma = 0;
  for (float v : values) beyond_two_sigma += std::fabs(v) > 2.0f;
  EXPECT_NEAR(static_cast<double>(beyond_two_sigma) / values.size(), 0.0455, 0.003);
  // A prefix is the same whatever the length drawn (no hidden sequential state).
  std::vector<float> prefix(1001);
  fill_normal(prefix.data(), 1001, 1.0, 42, 9);
  for (size_t i = 0; i < prefix.size(); ++i) ASSERT_EQ(prefix[i], values[i]);
  EXPECT_EQ(random_bits(1, 2, 3), random_bits(1, 2, 3));
  EXPECT_NE(random_bits(1, 2, 3), random_bits(1, 2, 4));
  EXPECT_NE(random_bits(1, 2, 3), random_bits(1, 3, 3));
  EXPECT_NE(fnv1a64("model.norm.weight"), fnv1a64("model.norm.bias"));
}

}  // namespace
}  // namespace anvil::test
