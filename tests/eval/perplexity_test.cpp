// Perplexity windows and numbers: the window plan (non-overlapping and strided, as the Hugging
// Face guide's loop), per-window mean losses equal to transformers' outputs.loss on the llama3
// fixture, batching that changes nothing beyond rounding (exactly nothing on the reference
// backend), anvil's tokenizer reproducing the ids HF evaluated, and the input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "eval/perplexity.h"
#include "eval_test_util.h"
#include "model/hf_checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace anvil::test {
namespace {

struct Plan {
  int64_t begin, end, score_from;
};

void expect_plan(int64_t n, int seq_len, int stride, const std::vector<Plan>& want) {
  const std::vector<PerplexityWindow> got = plan_perplexity_windows(n, seq_len, stride);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].begin, want[i].begin) << i;
    EXPECT_EQ(got[i].end, want[i].end) << i;
    EXPECT_EQ(got[i].score_from, want[i].score_from) << i;
  }
}

TEST(PerplexityWindows, NonOverlappingWindowsPredictTheirOwnTokens) {
  expect_plan(10, 4, 0, {{0, 4, 1}, {4, 8, 5}, {8, 10, 9}});
  expect_plan(9, 4, 4, {{0, 4, 1}, {4, 8, 5}});  // a 1-token tail predicts nothing
  expect_plan(3, 8, 0, {{0, 3, 1}});
}

TEST(PerplexityWindows, StridedWindowsScoreEachTokenOnce) {
  expect_plan(10, 4, 2, {{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}});
  expect_plan(11, 4, 3, {{0, 4, 1}, {3, 7, 4}, {6, 10, 7}, {9, 11, 10}});
  // With overlap every token but the first is scored once; without, each window start is not.
  for (int stride = 1; stride <= 7; ++stride) {
    int64_t scored = 0;
    for (const PerplexityWindow& w : plan_perplexity_windows(50, 7, stride)) scored += w.scored();
    EXPECT_EQ(scored, stride < 7 ? 49 : 50 - 8) << "stride " << stride;
  }
}

TEST(PerplexityWindows, RejectsBadArguments) {
  expect_error([] { plan_perplexity_windows(1, 4, 0); }, {"at least 2 tokens"});
  expect_error([] { plan_perplexity_windows(10, 1, 0); }, {"--seq-len", "at least 2"});
  expect_error([] { plan_perplexity_windows(10, 4, 5); }, {"--stride", "between 1 and"});
}

class PerplexityGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    golden_ = golden_json("llama3");
    ids_ = golden_["eval_text_ids"].get<std::vector<int32_t>>();
    ModelOptions options;
    options.max_batch = 4;
    options.max_seq = 16;
    model_ = load_hf_model(golden_dir("llama3"), *backend_, options);
  }

  std::unique_ptr<Backend> backend_ = make_backend("cpu");
  nlohmann::json golden_;
  std::vector<int32_t> ids_;
  std::unique_ptr<LlamaModel> model_;
};

TEST_F(PerplexityGolden, AnvilTokenizerGivesTheIdsTransformersEvaluated) {
  const std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::load((golden_dir("llama3") / "tokenizer.json").string());
  const std::string text = read_file(std::filesystem::path(ANVIL_HF_GOLDEN_DIR) / "eval_text.txt");
  EXPECT_EQ(tokenizer->encode(text, true), ids_);
}

TEST_F(PerplexityGolden, WindowLossesMatchTransformers) {
  for (const auto& reference : golden_["perplexity"]) {
    const int seq_len = reference["seq_len"], stride = reference["stride"];
    SCOPED_TRACE(testing::Message() << "seq_len " << seq_len << " stride " << stride);
    std::vector<std::pair<PerplexityWindow, LossSum>> windows;
    PerplexityOptions options;
    options.seq_len = seq_len;
    options.stride = stride;
    options.on_batch = [&](std::span<const PerplexityWindow> batch, const LossSum& loss) {
      ASSERT_EQ(batch.size(), 1u);
      windows.emplace_back(batch[0], loss);
    };
    const PerplexityResult result = evaluate_perplexity(*model_, ids_, options);
    const auto& want = reference["windows"];
    ASSERT_EQ(windows.size(), want.size());
    double worst = 0.0;
    for (size_t i = 0; i < windows.size(); ++i) {
      const auto& [window, loss] = windows[i];
      EXPECT_EQ(window.begin, want[i]["begin"].get<int64_t>()) << i;
      EXPECT_EQ(window.end, want[i]["end"].get<int64_t>()) << i;
      EXPECT_EQ(loss.count, want[i]["scored"].get<int64_t>()) << i;
      worst = std::max(worst, std::fabs(loss.mean() - want[i]["mean_loss"].get<double>()));
    }
    EXPECT_LE(worst, 1e-5);
    EXPECT_EQ(result.scored_tokens, reference["tokens"].get<int64_t>());
    EXPECT_NEAR(result.loss, reference["loss"].get<double>(), 1e-5);
    EXPECT_NEAR(result.perplexity, std::exp(reference["loss"].get<double>()), 1e-3);
    EXPECT_EQ(result.input_tokens, static_cast<int64_t>(ids_.size()));
  }
}

// Returns the perplexity of ids with windows of 16 and stride 5, one window per batch or up to
// four; checks the batching itself (never more than four rows, fewer batches than windows).
std::pair<PerplexityResult, PerplexityResult> one_and_four_per_batch(
    LlamaModel& model, const std::vector<int32_t>& ids) {
  PerplexityOptions one;
  one.seq_len = 16;
  one.stride = 5;
  PerplexityOptions four = one;
  four.batch_size = 4;
  int batches = 0;
  four.on_batch = [&](std::span<const PerplexityWindow> batch, const LossSum&) {
    EXPECT_LE(batch.size(), 4u);
    ++batches;
  };
  const PerplexityResult a = evaluate_perplexity(model, ids, one);
  const PerplexityResult b = evaluate_perplexity(model, ids, four);
  EXPECT_EQ(a.scored_tokens, b.scored_tokens);
  EXPECT_EQ(a.windows, b.windows);
  EXPECT_LT(batches, a.windows);
  return {a, b};
}

// The reference backend computes every row with the same loops whatever the batch holds, so
// batching may change only the order the per-token losses are added in (in double, exact to
// a few ulps): the same number, or a bug in how windows are packed into rows. The first 64
// tokens (eleven windows, so batches of four and a short one) keep the plain loops quick.
TEST_F(PerplexityGolden, BatchingChangesNothingOnTheReferenceBackend) {
  ASSERT_GE(ids_.size(), 64u);
  const std::vector<int32_t> prefix(ids_.begin(), ids_.begin() + 64);
  const std::unique_ptr<Backend> reference = make_backend("cpu-ref");
  ModelOptions options;
  options.max_batch = 4;
  options.max_seq = 16;
  const std::unique_ptr<LlamaModel> model = load_hf_model(golden_dir("llama3"), *reference, options);
  const auto [one, four] = one_and_four_per_batch(*model, prefix);
  EXPECT_DOUBLE_EQ(one.loss, four.loss);
}

// An optimized GEMM picks its blocking, and whether it splits K across threads, by the shape,
// so a row's f32 sums may run in another order when the batch has more rows; nothing promises
// the same bits. The bound is first-order error analysis, not a measurement: any order of a
// K-term f32 dot product is within gamma_K ~ K u of the exact one (Higham, Accuracy and
// Stability, Thm 3.4; u = 2^-24), so two orders differ by at most 2 K u relative; the loss sees
// one such GEMM stage per attention and MLP half of each layer plus the head (the norms
// between them keep relative errors from growing), with K the longest reduction (dim, FFN
// width, or the vocabulary of the softmax). Row mix-ups or mis-scored tokens move the loss by
// orders of magnitude more; the reference test above pins those exactly.
TEST_F(PerplexityGolden, BatchingChangesOnlyRoundingOnTheOptimizedBackend) {
  const auto [one, four] = one_and_four_per_batch(*model_, ids_);
  const LlamaConfig& config = model_->config();
  const double u = std::ldexp(1.0, -24);
  const double longest_sum = std::max({config.dim, config.ffn_dim, config.vocab_size});
  const double stages = 2.0 * config.n_layers + 1.0;
  const double bound = stages * 2.0 * longest_sum * u;
  std::printf("batch 1 vs 4: relative difference %.3g, bound %.3g\n",
              std::fabs(one.loss - four.loss) / std::fabs(one.loss), bound);
  EXPECT_NEAR(one.loss, four.loss, bound * std::fabs(one.loss));
}

TEST_F(PerplexityGolden, RejectsOutOfVocabularyIdsAndOversizedWindows) {
  std::vector<int32_t> ids = ids_;
  ids[20] = 320;
  PerplexityOptions options;
  options.seq_len = 16;
  expect_error([&] { evaluate_perplexity(*model_, ids, options); },
               {"token id 320 at position 20", "vocabulary of 320"});
  options.seq_len = 32;
  expect_error([&] { evaluate_perplexity(*model_, ids_, options); },
               {"32 tokens exceed the model's context of 16"});
  options.seq_len = 16;
  options.batch_size = 5;
  expect_error([&] { evaluate_perplexity(*model_, ids_, options); }, {"batch size 5"});
}

}  // namespace
}  // namespace anvil::test
