// Parity with transformers: each fixture family (tools/golden/make_hf_golden.py) is loaded from
// the directory save_pretrained wrote, and anvil's f32 logits and 20 greedy tokens (prefill +
// KV-cache steps) must match what transformers computed from the same files in float32.
// The per-family max abs logit error is printed so drifts show before they fail.
#include <gtest/gtest.h>

#include <cmath>

#include "eval_test_util.h"
#include "model/hf_checkpoint.h"
#include "model/kv_cache.h"
#include "model/sampling.h"

namespace anvil::test {
namespace {

// f32 against f32 with different summation orders; logits here are O(1).
constexpr double kMaxLogitError = 1e-4;

class HfParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = golden_json(GetParam());
    int longest = 0;
    for (const auto& input : golden_["inputs"]) longest = std::max(longest, int(input.size()));
    ModelOptions options;
    options.max_seq = longest;
    model_ = load_hf_model(golden_dir(GetParam()), *backend_, options, &config_);
  }

  std::unique_ptr<Backend> backend_ = make_backend("cpu");
  nlohmann::json golden_;
  HfModelConfig config_;
  std::unique_ptr<LlamaModel> model_;
};

TEST_P(HfParity, LogitsMatchTransformers) {
  const SafetensorsFile expected_file =
      SafetensorsFile::open(golden_dir(GetParam()) / "logits.safetensors");
  const int vocab = config_.llama.vocab_size;
  double worst = 0.0;
  for (size_t i = 0; i < golden_["inputs"].size(); ++i) {
    std::vector<int32_t> tokens = golden_["inputs"][i].get<std::vector<int32_t>>();
    const int seq = static_cast<int>(tokens.size());
    std::vector<float> logits(static_cast<size_t>(seq) * vocab);
    model_->forward_logits(host_view(tokens, DType::i32, Shape{1, seq}),
                           host_view(logits, DType::f32, Shape{1, seq, vocab}));
    const SafetensorsEntry& expected = expected_file.at("logits." + std::to_string(i));
    ASSERT_EQ(expected.shape, (std::vector<int64_t>{seq, vocab}));
    std::vector<float> want(logits.size());
    expected.read_f32(want);
    for (size_t k = 0; k < want.size(); ++k) {
      worst = std::max(worst, std::fabs(static_cast<double>(logits[k]) - want[k]));
    }
  }
  std::printf("[ parity ] %-8s max abs logit error %.3g (transformers %s)\n", GetParam().c_str(),
              worst, golden_["transformers_version"].get<std::string>().c_str());
  EXPECT_LE(worst, kMaxLogitError);
}

TEST_P(HfParity, GreedyTokensMatchTransformers) {
  std::vector<int32_t> step = golden_["prompt"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = golden_["greedy_tokens"].get<std::vector<int32_t>>();
  const int vocab = config_.llama.vocab_size;
  KvCache cache(config_.llama, *backend_, 1, static_cast<int>(step.size() + want.size()));
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> got;
  while (got.size() < want.size()) {
    const int n = static_cast<int>(step.size());
    model_->forward_step(host_view(step, DType::i32, Shape{1, n}), cache,
                         host_view(logits, DType::f32, Shape{1, vocab}));
    got.push_back(argmax(logits));
    step.assign(1, got.back());
  }
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Families, HfParity, ::testing::ValuesIn(golden_families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace anvil::test
