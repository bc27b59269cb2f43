// LlamaModel behaviour beyond the golden values: GQA equals MHA with repeated kv heads, the
// document mask acts only across boundaries, masked tokens carry no gradient, gradients
// accumulate across calls, hooks fire in the documented order, and bad inputs fail clearly.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "core/error.h"
#include "model_test_util.h"

namespace anvil::test {
namespace {

constexpr int kBatch = 2;
constexpr int kSeq = 12;

ModelOptions options_for(int batch = kBatch, int seq = kSeq) {
  ModelOptions options;
  options.max_batch = batch;
  options.max_seq = seq;
  return options;
}

// Holds a (B, T) batch in host vectors.
struct HostBatch {
  std::vector<int32_t> tokens, targets, doc_ids;
  std::vector<float> mask;
  Tensor mask_view, doc_view;

  int batch_size, seq_len;

  HostBatch(int batch, int seq, int vocab, uint32_t seed)
      : tokens(make_tokens(batch, seq, vocab, seed)),
        targets(make_tokens(batch, seq, vocab, seed + 1)),
        batch_size(batch),
        seq_len(seq) {}
  Shape shape() const { return Shape{batch_size, seq_len}; }
  Batch batch() {
    Batch b;
    b.tokens = host_view(tokens, DType::i32, shape());
    b.targets = host_view(targets, DType::i32, shape());
    if (!mask.empty()) {
      mask_view = host_view(mask, DType::f32, shape());
      b.loss_mask = &mask_view;
    }
    if (!doc_ids.empty()) {
      doc_view = host_view(doc_ids, DType::i32, shape());
      b.doc_ids = &doc_view;
    }
    return b;
  }
};

std::vector<float> logits_of(LlamaModel& model, std::vector<int32_t>& tokens, int batch,
                             const Tensor* doc_ids = nullptr) {
  const int seq = static_cast<int>(tokens.size()) / batch;
  const int vocab = model.config().vocab_size;
  std::vector<float> out(static_cast<size_t>(batch) * seq * vocab);
  model.forward_logits(host_view(tokens, DType::i32, Shape{batch, seq}),
                       host_view(out, DType::f32, Shape{batch, seq, vocab}), doc_ids);
  return out;
}

TEST(ModelTest, GroupedQueryAttentionEqualsRepeatedKvHeads) {
  auto backend = make_backend("cpu");
  for (int kv_heads : {1, 2, 4}) {
    LlamaConfig gqa = tiny_config();
    gqa.n_kv_heads = kv_heads;
    LlamaConfig mha = gqa;
    mha.n_kv_heads = mha.n_heads;
    LlamaModel small(gqa, *backend, options_for()), full(mha, *backend, options_for());
    small.init_weights(5);
    full.init_weights(5);
    // Copy every tensor; k/v projections of MHA head h come from GQA kv head h / group.
    const int group = gqa.n_heads / kv_heads, d = gqa.resolved_head_dim(), c = gqa.dim;
    for (const ParameterInfo& info : small.parameters().layout().params()) {
      const std::vector<float> values = to_host(*backend, small.parameters().tensor(info.name));
      const bool is_kv = info.name.find("k_proj") != std::string::npos ||
                         info.name.find("v_proj") != std::string::npos;
      if (!is_kv) {
        backend->copy_from_host(full.parameters().tensor(info.name), values.data());
        continue;
      }
      std::vector<float> repeated;
      for (int h = 0; h < mha.n_heads; ++h) {
        const auto begin = values.begin() + static_cast<ptrdiff_t>(h / group) * d * c;
        repeated.insert(repeated.end(), begin, begin + static_cast<ptrdiff_t>(d) * c);
      }
      backend->copy_from_host(full.parameters().tensor(info.name), repeated.data());
    }
    std::vector<int32_t> tokens = make_tokens(kBatch, kSeq, gqa.vocab_size, 3);
    EXPECT_LE(relative_max_error(logits_of(small, tokens, kBatch), logits_of(full, tokens, kBatch)),
              1e-6)
        << "kv_heads " << kv_heads;
  }
}

TEST(ModelTest, DocumentMaskActsOnlyAcrossBoundaries) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = tiny_config();
  LlamaModel model(c, *backend, options_for());
  model.init_weights(1);
  std::vector<int32_t> tokens = make_tokens(kBatch, kSeq, c.vocab_size, 9);
  const int boundary = 5;  // row 0: doc 0 = [0, 5), doc 1 = [5, 12); row 1: one document
  std::vector<int32_t> docs(kBatch * kSeq, 0);
  for (int t = boundary; t < kSeq; ++t) docs[t] = 1;
  const Tensor doc_view = host_view(docs, DType::i32, Shape{kBatch, kSeq});
  const std::vector<float> plain = logits_of(model, tokens, kBatch);
  const std::vector<float> masked = logits_of(model, tokens, kBatch, &doc_view);
  const size_t v = c.vocab_size;
  const auto row = [&](const std::vector<float>& l, int b, int t) {
    return std::vector<float>(l.begin() + (static_cast<size_t>(b) * kSeq + t) * v,
                              l.begin() + (static_cast<size_t>(b) * kSeq + t + 1) * v);
  };
  for (int t = 0; t < kSeq; ++t) {
    const bool same = bitwise_equal(row(plain, 0, t), row(masked, 0, t));
    EXPECT_EQ(same, t < boundary) << "position " << t;
    EXPECT_TRUE(bitwise_equal(row(plain, 1, t), row(masked, 1, t))) << "row 1 position " << t;
  }
  // The second document sees only itself: its logits equal running it alone from position 0,
  // up to RoPE's f32 angle rounding (attention depends only on relative positions).
  std::vector<int32_t> alone(tokens.begin() + boundary, tokens.begin() + kSeq);
  const std::vector<float> alone_logits = logits_of(model, alone, 1);
  for (int t = boundary; t < kSeq; ++t) {
    const std::vector<float> want(alone_logits.begin() + (t - boundary) * v,
                                  alone_logits.begin() + (t - boundary + 1) * v);
    EXPECT_LE(relative_max_error(row(masked, 0, t), want), 1e-5) << "position " << t;
  }
}

TEST(ModelTest, MaskedTokensCarryNoLossAndNoGradient) {
  auto backend = make_backend("cpu");
  LlamaConfig c = tiny_config();
  c.attention_bias = true;
  LlamaModel model(c, *backend, options_for());
  model.init_weights(2);

  HostBatch all_masked(kBatch, kSeq, c.vocab_size, 4);
  all_masked.mask.assign(kBatch * kSeq, 0.0f);
  model.gradients().zero();
  const LossSum none = model.forward_backward(all_masked.batch(), 1.0f);
  EXPECT_EQ(none.count, 0);
  EXPECT_EQ(none.sum, 0.0);
  for (float g : all_gradients(model)) ASSERT_EQ(g, 0.0f);

  // A 0 in the loss mask and kIgnoreIndex as the target are the same thing.
  HostBatch with_mask(kBatch, kSeq, c.vocab_size, 4);
  with_mask.mask.assign(kBatch * kSeq, 1.0f);
  HostBatch with_ignore = with_mask;
  with_ignore.mask.clear();
  for (int i : {0, 1, 2, 7, 13, 23}) {
    with_mask.mask[i] = 0.0f;
    with_ignore.targets[i] = kIgnoreIndex;
  }
  model.gradients().zero();
  const LossSum a = model.forward_backward(with_mask.batch(), 0.25f);
  const std::vector<float> grads_mask = all_gradients(model);
  model.gradients().zero();
  const LossSum b = model.forward_backward(with_ignore.batch(), 0.25f);
  EXPECT_EQ(a.count, kBatch * kSeq - 6);
  EXPECT_EQ(b.count, a.count);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_TRUE(bitwise_equal(grads_mask, all_gradients(model)));
  EXPECT_EQ(model.count_loss_tokens(with_mask.batch()), a.count);
}

TEST(ModelTest, GradientsAccumulateAcrossCalls) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = tiny_config();
  LlamaModel model(c, *backend, options_for());
  model.init_weights(6);
  HostBatch data(kBatch, kSeq, c.vocab_size, 8);
  model.gradients().zero();
  const LossSum once = model.forward_backward(data.batch(), 1.0f);
  const std::vector<float> single = all_gradients(model);
  model.gradients().zero();
  const LossSum first = model.forward_backward(data.batch(), 0.5f);
  const LossSum second = model.forward_backward(data.batch(), 0.5f);
  EXPECT_EQ(first.sum, once.sum);
  EXPECT_EQ(second.sum, once.sum);
  // Halving is exact, but a backend may add a partial product to the accumulator before
  // rounding it, so the two halves match the single call to about one f32 rounding.
  EXPECT_LE(relative_max_error(all_gradients(model), single), 1e-6);
  EXPECT_NE(std::count(single.begin(), single.end(), 0.0f), static_cast<ptrdiff_t>(single.size()));
  const LossSum eval = model.forward_loss(data.batch());
  EXPECT_EQ(eval.sum, once.sum);
  EXPECT_EQ(eval.count, once.count);
}

TEST(ModelTest, ShorterBatchesReuseTheArena) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = tiny_config();
  LlamaModel model(c, *backend, options_for());
  model.init_weights(4);
  LlamaModel exact(c, *backend, options_for(1, 7));
  copy_parameters(model, exact);
  std::vector<int32_t> tokens = make_tokens(1, 7, c.vocab_size, 2);
  std::vector<int32_t> long_tokens = make_tokens(kBatch, kSeq, c.vocab_size, 5);
  logits_of(model, long_tokens, kBatch);  // leaves full-size activations behind
  EXPECT_TRUE(bitwise_equal(logits_of(model, tokens, 1), logits_of(exact, tokens, 1)));
}

class RecordingHooks : public GroupHooks {
 public:
  void before_forward(int g) override { events += "F" + std::to_string(g) + " "; }
  void after_forward(int g) override { events += "f" + std::to_string(g) + " "; }
  void before_backward(int g) override { events += "B" + std::to_string(g) + " "; }
  void after_backward(int g) override { events += "b" + std::to_string(g) + " "; }
  std::string events;
};

TEST(ModelTest, GroupHooksFollowTheDocumentedOrder) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = tiny_config();  // 2 layers: groups 0, 1, 2, head 3
  ModelOptions options = options_for();
  options.activation_checkpointing = true;
  LlamaModel model(c, *backend, options);
  model.init_weights(1);
  RecordingHooks hooks;
  model.set_group_hooks(&hooks);
  HostBatch data(kBatch, kSeq, c.vocab_size, 1);
  model.forward_backward(data.batch(), 1.0f);
  EXPECT_EQ(hooks.events, "F0 f0 F1 f1 F2 f2 F3 b3 B2 b2 B1 b1 B0 b0 ");
  hooks.events.clear();
  model.forward_loss(data.batch());
  EXPECT_EQ(hooks.events, "F0 f0 F1 f1 F2 f2 F3 f3 ");
  model.set_group_hooks(nullptr);
}

void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// The attention schedule reaches every layer: with a window of w on both layers, the logits
// at position t depend on tokens back to t - 2(w - 1) and no further; making the second layer
// dense (dense_every = 2) lets the first token reach every position. KV-cache decoding uses
// the same masks as the full forward.
TEST(ModelTest, AttentionScheduleMasksEachLayer) {
  auto backend = make_backend("cpu");
  const int seq = 32, window = 8, vocab = tiny_config().vocab_size;
  std::vector<int32_t> tokens(seq), changed(seq);
  for (int t = 0; t < seq; ++t) tokens[t] = changed[t] = (t * 7 + 3) % vocab;
  changed[0] = (tokens[0] + 1) % vocab;
  for (int dense_every : {0, 2}) {
    ModelOptions options = options_for(1, seq);
    options.attention.window = window;
    options.attention.dense_every = dense_every;
    LlamaModel model(tiny_config(), *backend, options);
    model.init_weights(11);
    const std::vector<float> a = logits_of(model, tokens, 1), b = logits_of(model, changed, 1);
    const int reach = 2 * (window - 1);  // last position the first token still reaches
    for (int t = 0; t < seq; ++t) {
      const std::vector<float> row_a(a.begin() + t * vocab, a.begin() + (t + 1) * vocab);
      const std::vector<float> row_b(b.begin() + t * vocab, b.begin() + (t + 1) * vocab);
      const bool reached = dense_every == 2 || t <= reach;
      EXPECT_EQ(!bitwise_equal(row_a, row_b), reached) << "position " << t << " dense_every "
                                                       << dense_every;
    }
    // Decoding token by token through the KV cache gives the full forward's last logits.
    KvCache cache(tiny_config(), *backend, 1, seq);
    std::vector<float> step_logits(static_cast<size_t>(vocab));
    for (int t = 0; t < seq; ++t) {
      std::vector<int32_t> token = {tokens[t]};
      model.forward_step(host_view(token, DType::i32, Shape{1, 1}), cache,
                         host_view(step_logits, DType::f32, Shape{1, vocab}));
    }
    const std::vector<float> last(a.end() - vocab, a.end());
    EXPECT_LT(relative_max_error(step_logits, last), 1e-5) << "dense_every " << dense_every;
  }
}

TEST(ModelTest, RejectsBadOptionsAndInputs) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = tiny_config();
  // f16 has kernels on the optimized CPU backend too; only a backend without them (cuda) refuses.
  ModelOptions f16 = options_for();
  f16.compute_dtype = DType::f16;
  EXPECT_NO_THROW({ LlamaModel m(c, *backend, f16); });
  ModelOptions i32 = options_for();
  i32.compute_dtype = DType::i32;
  expect_error([&] { LlamaModel m(c, *backend, i32); }, "compute dtype must be f32, bf16 or f16");
  expect_error([&] { LlamaModel m(c, *backend, options_for(1, 64)); }, "max_seq 64");
  LlamaModel model(c, *backend, options_for());
  HostBatch too_long(kBatch, kSeq + 1, c.vocab_size, 1);
  expect_error([&] { model.forward_loss(too_long.batch()); }, "sequence length 13");
  HostBatch bad_target(kBatch, kSeq, c.vocab_size, 1);
  bad_target.targets[3] = c.vocab_size;
  expect_error([&] { model.forward_loss(bad_target.batch()); }, "out of range");
  HostBatch bad_token(kBatch, kSeq, c.vocab_size, 1);
  bad_token.tokens[0] = -1;
  EXPECT_THROW(model.forward_loss(bad_token.batch()), Error);
  HostBatch wrong_mask(kBatch, kSeq, c.vocab_size, 1);
  std::vector<int32_t> int_mask(kBatch * kSeq, 1);
  const Tensor int_mask_view = host_view(int_mask, DType::i32, Shape{kBatch, kSeq});
  Batch batch = wrong_mask.batch();
  batch.loss_mask = &int_mask_view;
  expect_error([&] { model.forward_loss(batch); }, "loss_mask");
}

// Long-context training rests on this: the activation arena is a + b * T in the sequence length
// T (no (T, T) scores, the loss chunked by rows), with and without activation checkpointing.
// On a device backend the kernels never read ids back to check them: the model checks its
// host inputs before uploading them, so a bad id or target is one error line at the call and
// the host never waits on the device for it.
TEST(ModelTest, BadIdsAreRefusedOnTheHost) {
  auto backend = make_backend("sim");
  const LlamaConfig c = tiny_config();
  LlamaModel model(c, *backend, options_for());
  HostBatch bad_token(kBatch, kSeq, c.vocab_size, 1);
  bad_token.tokens[5] = c.vocab_size + 3;
  const HostWaits before = backend->host_waits();
  expect_error([&] { model.forward_backward(bad_token.batch(), 1.0f); },
               fmt::format("[model] token id {} out of range [0, {}) at position 5",
                           c.vocab_size + 3, c.vocab_size));
  HostBatch bad_target(kBatch, kSeq, c.vocab_size, 1);
  bad_target.targets[2] = -7;
  expect_error([&] { model.forward_backward(bad_target.batch(), 1.0f); },
               fmt::format("[model] target -7 out of range [0, {}) at row 2", c.vocab_size));
  EXPECT_EQ((backend->host_waits() - before).waits, 0);
}

TEST(ModelTest, ActivationArenaGrowsLinearlyWithTheSequence) {
  auto backend = make_backend("cpu");
  LlamaConfig config = tiny_config();
  config.max_seq_len = 4096;
  for (bool checkpointing : {false, true}) {
    std::vector<int64_t> bytes;
    for (int seq : {1024, 2048, 4096}) {
      ModelOptions options = options_for(1, seq);
      options.activation_checkpointing = checkpointing;
      // A fixed chunk, as a large vocabulary gets: the logits stay (chunk, V) at any T.
      options.logits_chunk_rows = 256;
      const LlamaModel model(config, *backend, options);
      bytes.push_back(static_cast<int64_t>(model.activation_bytes()));
    }
    EXPECT_EQ(bytes[2] - bytes[1], 2 * (bytes[1] - bytes[0])) << "checkpointing " << checkpointing;
  }
}

}  // namespace
}  // namespace anvil::test
