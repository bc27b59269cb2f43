// KV-cache generation: logits from prefill + one-token steps (and chunked prefill) equal the
// full forward's logits at every position, per batch row; the cache enforces its capacity.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model_test_util.h"

namespace anvil::test {
namespace {

constexpr double kTolerance = 1e-5;

LlamaConfig generation_config() {
  LlamaConfig c = tiny_config();
  c.attention_bias = true;
  c.tie_embeddings = true;
  return c;
}

// Returns the full forward's logits (B, T, V) for the given tokens.
std::vector<float> full_logits(LlamaModel& model, std::vector<int32_t>& tokens, int batch,
                               int seq) {
  const int v = model.config().vocab_size;
  std::vector<float> out(static_cast<size_t>(batch) * seq * v);
  model.forward_logits(host_view(tokens, DType::i32, Shape{batch, seq}),
                       host_view(out, DType::f32, Shape{batch, seq, v}));
  return out;
}

// Feeds tokens (B, T) to the cache in the given chunk lengths and checks each chunk's
// last-position logits against the full forward.
void check_incremental(LlamaModel& model, int batch, int seq, const std::vector<int>& chunks) {
  const int v = model.config().vocab_size;
  std::vector<int32_t> tokens = make_tokens(batch, seq, v, 17);
  const std::vector<float> want = full_logits(model, tokens, batch, seq);
  KvCache cache(model.config(), model.backend(), batch, seq);
  std::vector<float> logits(static_cast<size_t>(batch) * v);
  int pos = 0;
  for (int n : chunks) {
    std::vector<int32_t> step;
    for (int b = 0; b < batch; ++b) {
      step.insert(step.end(), tokens.begin() + b * seq + pos, tokens.begin() + b * seq + pos + n);
    }
    model.forward_step(host_view(step, DType::i32, Shape{batch, n}), cache,
                       host_view(logits, DType::f32, Shape{batch, v}));
    pos += n;
    ASSERT_EQ(cache.length(), pos);
    for (int b = 0; b < batch; ++b) {
      const auto begin = want.begin() + (static_cast<ptrdiff_t>(b) * seq + pos - 1) * v;
      const std::vector<float> expected(begin, begin + v);
      const std::vector<float> got(logits.begin() + b * v, logits.begin() + (b + 1) * v);
      EXPECT_LE(relative_max_error(got, expected), kTolerance)
          << "row " << b << " position " << pos - 1;
    }
  }
}

TEST(GenerationTest, PrefillThenDecodeMatchesFullForward) {
  auto backend = make_backend("cpu");
  ModelOptions options;
  options.max_batch = 2;
  options.max_seq = 12;
  LlamaModel model(generation_config(), *backend, options);
  model.init_weights(21);
  check_incremental(model, 1, 12, {5, 1, 1, 1, 1, 1, 1, 1});
  check_incremental(model, 2, 12, {4, 1, 1, 1, 1, 1, 1, 1, 1});
}

TEST(GenerationTest, ChunkedPrefillMatchesFullForward) {
  auto backend = make_backend("cpu");
  ModelOptions options;
  options.max_batch = 2;
  options.max_seq = 12;
  LlamaModel model(generation_config(), *backend, options);
  model.init_weights(22);
  check_incremental(model, 2, 12, {3, 4, 1, 2, 2});
}

TEST(GenerationTest, CacheEnforcesCapacityAndBatch) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = generation_config();
  ModelOptions options;
  options.max_batch = 2;
  options.max_seq = 8;
  LlamaModel model(c, *backend, options);
  model.init_weights(1);
  KvCache cache(c, *backend, 2, 6);
  std::vector<int32_t> tokens = make_tokens(2, 4, c.vocab_size, 1);
  std::vector<float> logits(2 * c.vocab_size);
  const Tensor logits_view = host_view(logits, DType::f32, Shape{2, c.vocab_size});
  model.forward_step(host_view(tokens, DType::i32, Shape{2, 4}), cache, logits_view);
  EXPECT_THROW(model.forward_step(host_view(tokens, DType::i32, Shape{2, 4}), cache, logits_view),
               Error);
  EXPECT_EQ(cache.length(), 4);
  std::vector<int32_t> one(1, 3);
  std::vector<float> one_logits(c.vocab_size);
  EXPECT_THROW(model.forward_step(host_view(one, DType::i32, Shape{1, 1}), cache,
                                  host_view(one_logits, DType::f32, Shape{1, c.vocab_size})),
               Error);
  cache.reset();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_NO_THROW(model.forward_step(host_view(one, DType::i32, Shape{1, 1}), cache,
                                     host_view(one_logits, DType::f32, Shape{1, c.vocab_size})));
}

}  // namespace
}  // namespace anvil::test
