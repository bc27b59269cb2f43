// LoglikelihoodScorer: shared prefixes, merged duplicate inputs, batching, left truncation and
// calls split by the model's max_seq give the same log-likelihoods as one plain forward pass
// per request, and the closed-form answers of the bigram model.
#include "eval/loglikelihood.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "scorer_test_util.h"

namespace anvil::test {
namespace {

constexpr int kVocab = 61;
constexpr int kWindow = 40;

std::vector<int32_t> random_tokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> id(0, kVocab - 1);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = id(rng);
  return out;
}

// Requests in the shapes benchmarks make: a common few-shot prefix, questions of different
// lengths, single-token choices (equal inputs), multi-token choices, and inputs longer than
// the window (cut from the left).
std::vector<LoglikelihoodRequest> benchmark_like_requests() {
  std::mt19937 rng(5);
  const std::vector<int32_t> prefix = random_tokens(rng, 17);
  std::vector<LoglikelihoodRequest> requests;
  for (int q = 0; q < 7; ++q) {
    std::vector<int32_t> context = prefix;
    const std::vector<int32_t> question = random_tokens(rng, 2 + 3 * q % 11);
    context.insert(context.end(), question.begin(), question.end());
    for (int choice = 0; choice < 4; ++choice) {
      const int length = q % 2 == 0 ? 1 : 1 + (choice + q) % 4;
      requests.push_back({context, random_tokens(rng, length)});
    }
  }
  // Longer than the window: 30 + 15 tokens.
  requests.push_back({random_tokens(rng, 30), random_tokens(rng, 15)});
  requests.push_back({random_tokens(rng, 1), random_tokens(rng, 3)});
  return requests;
}

// One forward pass over the (cut) input of one request.
LoglikelihoodResult reference_score(LlamaModel& model, const LoglikelihoodRequest& request) {
  std::vector<int32_t> whole = request.context;
  whole.insert(whole.end(), request.continuation.begin(), request.continuation.end());
  const size_t cut = whole.size() - 1 > static_cast<size_t>(kWindow) ? whole.size() - 1 - kWindow : 0;
  std::vector<int32_t> input(whole.begin() + static_cast<std::ptrdiff_t>(cut), whole.end() - 1);
  const int n = static_cast<int>(input.size());
  std::vector<float> logits(static_cast<size_t>(n) * kVocab);
  model.forward_logits(Tensor(input.data(), DType::i32, {1, n}),
                       Tensor(logits.data(), DType::f32, {1, n, kVocab}));
  LoglikelihoodResult result{0.0, true};
  const int first = n - static_cast<int>(request.continuation.size());
  for (int p = first; p < n; ++p) {
    const float* row = logits.data() + static_cast<size_t>(p) * kVocab;
    const int32_t target = request.continuation[static_cast<size_t>(p - first)];
    double top = row[0], sum = 0.0;
    int argmax = 0;
    for (int v = 1; v < kVocab; ++v) {
      if (row[v] > top) top = row[v], argmax = v;
    }
    for (int v = 0; v < kVocab; ++v) sum += std::exp(row[v] - top);
    result.logprob += row[target] - top - std::log(sum);
    result.greedy = result.greedy && argmax == target;
  }
  return result;
}

TEST(LoglikelihoodScorer, EqualsOneForwardPerRequestUnderEveryBatching) {
  auto backend = make_backend("cpu");
  const LlamaConfig config = scorer_config(kVocab, 32, kWindow);
  ModelOptions whole_options;
  whole_options.max_batch = 1;
  whole_options.max_seq = kWindow;
  LlamaModel reference(config, *backend, whole_options);
  reference.init_weights(11);
  std::vector<LoglikelihoodRequest> requests = benchmark_like_requests();
  // A continuation that is the model's greedy choice, so `greedy` is tested both ways.
  {
    LoglikelihoodRequest probe{requests[0].context, {0}};
    std::vector<int32_t> input = probe.context;
    std::vector<float> logits(input.size() * kVocab);
    const int n = static_cast<int>(input.size());
    reference.forward_logits(Tensor(input.data(), DType::i32, {1, n}),
                             Tensor(logits.data(), DType::f32, {1, n, kVocab}));
    const float* last = logits.data() + static_cast<size_t>(n - 1) * kVocab;
    probe.continuation[0] = static_cast<int32_t>(std::max_element(last, last + kVocab) - last);
    requests.push_back(probe);
  }
  std::vector<LoglikelihoodResult> want;
  for (const LoglikelihoodRequest& r : requests) want.push_back(reference_score(reference, r));
  EXPECT_TRUE(want.back().greedy);

  // (max_seq, rows, logit rows): max_seq 7 splits prefixes and rows over several calls, two
  // logit rows per call split batches by their scored positions.
  const int settings[][3] = {{kWindow, 1, 512}, {kWindow, 8, 512}, {7, 3, 2}, {7, 8, 512}};
  for (const auto [max_seq, max_rows, max_logit_rows] : settings) {
    ModelOptions options;
    options.max_batch = max_rows;
    options.max_seq = max_seq;
    LlamaModel model(config, *backend, options);
    model.init_weights(11);
    LoglikelihoodScorer scorer(model, ScorerOptions{kWindow, max_rows, max_logit_rows});
    int64_t last_progress = 0;
    const std::vector<LoglikelihoodResult> got =
        scorer.score(requests, [&](int64_t done) { last_progress = done; });
    EXPECT_EQ(last_progress, static_cast<int64_t>(requests.size()));
    for (size_t r = 0; r < requests.size(); ++r) {
      EXPECT_NEAR(got[r].logprob, want[r].logprob, 1e-5 * std::max(1.0, std::abs(want[r].logprob)))
          << "request " << r << " max_seq " << max_seq << " rows " << max_rows;
      EXPECT_EQ(got[r].greedy, want[r].greedy) << "request " << r;
    }
  }
}

TEST(LoglikelihoodScorer, SharesThePrefixAndMergesEqualInputs) {
  auto backend = make_backend("cpu");
  const LlamaConfig config = scorer_config(kVocab, 32, kWindow);
  ModelOptions options;
  options.max_batch = 4;
  options.max_seq = kWindow;
  LlamaModel model(config, *backend, options);
  model.init_weights(3);
  std::mt19937 rng(9);
  const std::vector<int32_t> prefix = random_tokens(rng, 20);
  std::vector<LoglikelihoodRequest> requests;
  for (int q = 0; q < 4; ++q) {
    std::vector<int32_t> context = prefix;
    context.push_back(q);
    context.push_back(q + 1);
    for (int32_t letter = 10; letter < 14; ++letter) requests.push_back({context, {letter}});
  }
  LoglikelihoodScorer scorer(model, ScorerOptions{kWindow, 4, 512});
  scorer.score(requests);
  // The 20-token prefix once, then one row of two tokens per question (its four single-token
  // choices share that input).
  EXPECT_EQ(scorer.tokens_computed(), 20 + 4 * 2);
}

TEST(LoglikelihoodScorer, BigramModelGivesClosedFormAnswers) {
  auto backend = make_backend("cpu");
  const LlamaConfig config = scorer_config(kVocab, 16, kWindow);
  const std::vector<float> table = bigram_table(config.dim, kVocab, 21);
  ModelOptions options;
  options.max_batch = 3;
  options.max_seq = 16;
  const auto model = make_bigram_model(*backend, config, table, options);
  const std::vector<LoglikelihoodRequest> requests = benchmark_like_requests();
  LoglikelihoodScorer scorer(*model, ScorerOptions{kWindow, 3, 512});
  const std::vector<LoglikelihoodResult> got = scorer.score(requests);
  for (size_t r = 0; r < requests.size(); ++r) {
    double want = 0.0;
    bool all_greedy = true;
    int32_t previous = requests[r].context.back();
    for (const int32_t next : requests[r].continuation) {
      bool greedy = false;
      want += bigram_logprob(config, table, previous, next, &greedy);
      all_greedy = all_greedy && greedy;
      previous = next;
    }
    EXPECT_NEAR(got[r].logprob, want, 1e-4) << "request " << r;
    EXPECT_EQ(got[r].greedy, all_greedy) << "request " << r;
  }
}

TEST(LoglikelihoodScorer, RejectsRequestsItCannotScore) {
  auto backend = make_backend("cpu");
  const LlamaConfig config = scorer_config(kVocab, 16, kWindow);
  ModelOptions options;
  options.max_batch = 2;
  options.max_seq = kWindow;
  LlamaModel model(config, *backend, options);
  LoglikelihoodScorer scorer(model, ScorerOptions{kWindow, 2, 512});
  const auto fails = [&](LoglikelihoodRequest request, const char* message) {
    try {
      scorer.score(std::vector<LoglikelihoodRequest>{std::move(request)});
      ADD_FAILURE() << "no error for " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  fails({{1, 2}, {}}, "empty context or continuation");
  fails({{1, kVocab}, {2}}, "outside the model's vocabulary");
  fails({{1}, std::vector<int32_t>(kWindow + 1, 3)}, "does not fit the 40-token window");
}

}  // namespace
}  // namespace anvil::test
