// LoRA inside the model: adapter gradients against central finite differences, a frozen base
// without gradient buffers, bf16-only base storage, merge, activation checkpointing (also with
// dropout), dropout determinism and model-level loss masking.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "lora_test_util.h"
#include "model/kv_cache.h"
#include "model/llama.h"

namespace anvil::test {
namespace {

ModelOptions lora_options(LoraOptions lora, DType dtype = DType::f32, int max_seq = 16) {
  ModelOptions options;
  options.max_batch = 2;
  options.max_seq = max_seq;
  options.compute_dtype = dtype;
  options.lora = std::move(lora);
  return options;
}

// Returns the bytes of `category` a backend allocated between two snapshots.
int64_t allocated_between(const MemorySnapshot& before, const MemorySnapshot& after,
                          MemoryCategory category) {
  return after.current_of(category) - before.current_of(category);
}

// Returns the bytes of every group of `layout` in elements of `element_bytes` (padding included).
int64_t layout_bytes(const ParameterLayout& layout, int64_t element_bytes) {
  int64_t bytes = 0;
  for (int g = 0; g < layout.group_count(); ++g) bytes += layout.group_numel(g) * element_bytes;
  return bytes;
}

TEST(LoraModelTest, BaseIsFrozenAndAdaptersStartAsIdentity) {
  auto backend = make_backend("cpu");
  LlamaModel plain(tiny_config(), *backend, lora_options(LoraOptions{}));
  const MemorySnapshot before = backend->memory_snapshot();
  LlamaModel adapted(tiny_config(), *backend, lora_options(all_targets_lora()));
  const MemorySnapshot after = backend->memory_snapshot();
  plain.init_weights(5);
  adapted.init_weights(5);
  adapted.init_lora(9);
  EXPECT_FALSE(adapted.gradients().has_storage(1));
  EXPECT_TRUE(adapted.trainable().has_storage(1));
  EXPECT_EQ(adapted.trainable().layout().group_count(), plain.parameters().group_count());
  EXPECT_EQ(adapted.trainable().layout().group_numel(0), 0);
  EXPECT_EQ(adapted.trainable().layout().group_numel(3), 0);
  // B = 0 at init: the adapted model computes the base logits exactly.
  HostBatch batch = HostBatch::from_tokens(make_tokens(2, 10, 64, 3), 2, 10);
  EXPECT_TRUE(bitwise_equal(logits_of(plain, batch), logits_of(adapted, batch)));
  // A is Kaiming-uniform with bound 1/sqrt(in); B is zero.
  const std::vector<float> a =
      to_host(*backend, adapted.trainable().tensor(lora_param_name(1, "gate_proj", 'A')));
  const std::vector<float> b =
      to_host(*backend, adapted.trainable().tensor(lora_param_name(1, "gate_proj", 'B')));
  double max_a = 0.0;
  for (float v : a) max_a = std::max(max_a, std::fabs(double{v}));
  EXPECT_LE(max_a, 1.0 / std::sqrt(32.0));
  EXPECT_GT(max_a, 0.8 / std::sqrt(32.0));
  for (float v : b) EXPECT_EQ(v, 0.0f);
  // The base is counted as frozen and has no gradients; the adapters are f32 with f32
  // gradients (alignment padding included).
  const int64_t adapters = layout_bytes(adapted.trainable().layout(), 4);
  EXPECT_EQ(allocated_between(before, after, MemoryCategory::trainable_weights), adapters);
  EXPECT_EQ(allocated_between(before, after, MemoryCategory::gradients), adapters);
  EXPECT_EQ(allocated_between(before, after, MemoryCategory::frozen_weights),
            layout_bytes(adapted.parameters().layout(), 4));
  EXPECT_EQ(allocated_between(before, after, MemoryCategory::optimizer_state), 0);
}

// Central differences of the mean loss, in double around f32 evaluations on the reference
// backend: h = 1e-2 keeps the f32 rounding of the loss (~1e-7 relative) below 1e-4 of a
// typical derivative, and the truncation error O(h^2) is smaller still.
TEST(LoraModelTest, AdapterGradientsMatchFiniteDifferences) {
  auto backend = make_backend("cpu-ref");
  LlamaModel model(tiny_config(), *backend, lora_options(all_targets_lora(2, 4.0f)));
  model.init_weights(21);
  randomize_adapters(model, 22, 0.2);
  HostBatch batch = HostBatch::from_tokens(make_tokens(2, 8, 64, 4), 2, 8);
  Batch view = batch.view();
  const int64_t count = model.count_loss_tokens(view);
  model.trainable_gradients().zero();
  model.forward_backward(view, 1.0f / static_cast<float>(count));

  const double h = 1e-2;
  double worst = 0.0;
  for (const char* target : {"q_proj", "v_proj", "o_proj", "up_proj", "down_proj"}) {
    for (char which : {'A', 'B'}) {
      const std::string name = lora_param_name(1, target, which);
      const Tensor param = model.trainable().tensor(name);
      const std::vector<float> grad = to_host(*backend, model.trainable_gradients().tensor(name));
      std::vector<float> values = to_host(*backend, param);
      for (size_t i : {size_t{0}, values.size() / 2, values.size() - 1}) {
        const float saved = values[i];
        auto loss_at = [&](double delta) {
          values[i] = static_cast<float>(saved + delta);
          backend->copy_from_host(param, values.data());
          return model.forward_loss(view).mean();
        };
        const double numeric = (loss_at(h) - loss_at(-h)) / (2 * h);
        values[i] = saved;
        backend->copy_from_host(param, values.data());
        const double error = std::fabs(numeric - grad[i]);
        worst = std::max(worst, error);
        EXPECT_LE(error, 2e-4 + 1e-2 * std::fabs(numeric)) << name << "[" << i << "]";
      }
    }
  }
  std::printf("[lora] finite differences: max abs gradient error %.3e\n", worst);
}

TEST(LoraModelTest, MergedModelComputesAdapterLogits) {
  auto backend = make_backend("cpu");
  LlamaModel model(tiny_config(), *backend, lora_options(all_targets_lora()));
  model.init_weights(31);
  randomize_adapters(model, 32, 0.3);
  HostBatch batch = HostBatch::from_tokens(make_tokens(2, 12, 64, 5), 2, 12);
  const std::vector<float> adapted = logits_of(model, batch);
  model.merge_lora();
  const std::vector<float> merged = logits_of(model, batch);
  const double error = max_abs_error(merged, adapted);
  std::printf("[lora] merged vs adapter logits: max abs error %.3e\n", error);
  EXPECT_LE(error, 2e-5);
  LlamaModel plain(tiny_config(), *backend, lora_options(LoraOptions{}));
  copy_parameters(model, plain);
  EXPECT_LE(max_abs_error(logits_of(plain, batch), adapted), 2e-5);
}

TEST(LoraModelTest, CheckpointingGivesBitwiseEqualGradientsWithDropout) {
  auto backend = make_backend("cpu");
  for (DType dtype : {DType::f32, DType::bf16}) {
    ModelOptions stored = lora_options(all_targets_lora(4, 8.0f, 0.1f), dtype);
    ModelOptions recomputed = stored;
    recomputed.activation_checkpointing = true;
    LlamaModel a(tiny_config(), *backend, stored);
    LlamaModel b(tiny_config(), *backend, recomputed);
    for (LlamaModel* m : {&a, &b}) {
      m->init_weights(41);
      randomize_adapters(*m, 42, 0.2);
      m->set_dropout_step(7);
    }
    HostBatch batch = HostBatch::from_tokens(make_tokens(2, 16, 64, 6), 2, 16);
    Batch view = batch.view();
    const LossSum la = a.forward_backward(view, 0.1f);
    const LossSum lb = b.forward_backward(view, 0.1f);
    EXPECT_EQ(la.sum, lb.sum) << dtype_name(dtype);
    const std::vector<float> grads = trainable_gradients(a);
    EXPECT_TRUE(bitwise_equal(grads, trainable_gradients(b))) << dtype_name(dtype);
    for (float g : grads) ASSERT_TRUE(std::isfinite(g));
  }
}

TEST(LoraModelTest, DropoutMasksDependOnTheStepOnly) {
  auto backend = make_backend("cpu");
  LlamaModel model(tiny_config(), *backend, lora_options(all_targets_lora(4, 8.0f, 0.25f)));
  model.init_weights(51);
  randomize_adapters(model, 52, 0.2);
  HostBatch batch = HostBatch::from_tokens(make_tokens(2, 16, 64, 7), 2, 16);
  Batch view = batch.view();
  auto gradients_at = [&](int64_t step) {
    model.trainable_gradients().zero();
    model.set_dropout_step(step);
    model.forward_backward(view, 0.1f);
    return trainable_gradients(model);
  };
  const std::vector<float> first = gradients_at(3);
  EXPECT_TRUE(bitwise_equal(first, gradients_at(3)));
  EXPECT_FALSE(bitwise_equal(first, gradients_at(4)));
  // Evaluation never drops: forward_loss equals the dropout-free model's loss.
  LlamaModel no_dropout(tiny_config(), *backend, lora_options(all_targets_lora()));
  copy_parameters(model, no_dropout);
  for (int g = 0; g < model.trainable().group_count(); ++g)
    backend->copy(no_dropout.trainable().group(g), model.trainable().group(g));
  EXPECT_EQ(model.forward_loss(view).sum, no_dropout.forward_loss(view).sum);
}

TEST(LoraModelTest, MaskedPositionsCarryNoLossAndNoGradient) {
  auto backend = make_backend("cpu");
  LlamaModel model(tiny_config(), *backend, lora_options(all_targets_lora()));
  model.init_weights(61);
  randomize_adapters(model, 62, 0.2);
  HostBatch batch = HostBatch::from_tokens(make_tokens(2, 12, 64, 8), 2, 12);
  std::vector<float> mask(batch.tokens.size(), 1.0f);
  for (size_t i = 0; i < mask.size(); i += 3) mask[i] = 0.0f;
  Tensor mask_view = host_view(mask, DType::f32, Shape{2, 12});
  auto run = [&](HostBatch& b) {
    Batch view = b.view();
    view.loss_mask = &mask_view;
    model.trainable_gradients().zero();
    const LossSum loss = model.forward_backward(view, 0.05f);
    return std::make_pair(loss, trainable_gradients(model));
  };
  const auto [loss, grads] = run(batch);
  HostBatch changed = batch;
  for (size_t i = 0; i < mask.size(); i += 3)
    if (changed.targets[i] != kIgnoreIndex) changed.targets[i] = (changed.targets[i] + 17) % 64;
  const auto [loss2, grads2] = run(changed);
  EXPECT_EQ(loss.sum, loss2.sum);
  EXPECT_EQ(loss.count, loss2.count);
  EXPECT_TRUE(bitwise_equal(grads, grads2));
  // The mask does matter: changing an unmasked target changes the gradients.
  HostBatch unmasked = batch;
  unmasked.targets[1] = (unmasked.targets[1] + 17) % 64;
  EXPECT_FALSE(bitwise_equal(grads, run(unmasked).second));
}

TEST(LoraModelTest, Bf16BaseIsStoredInBf16OnlyAndTrains) {
  auto backend = make_backend("cpu");
  const LlamaConfig config = tiny_config();
  const MemorySnapshot start = backend->memory_snapshot();
  LlamaModel f32_model(config, *backend, lora_options(all_targets_lora()));
  const MemorySnapshot between = backend->memory_snapshot();
  LlamaModel bf16_model(config, *backend, lora_options(all_targets_lora(), DType::bf16));
  const MemorySnapshot end = backend->memory_snapshot();
  const int64_t frozen32 = allocated_between(start, between, MemoryCategory::frozen_weights);
  const int64_t frozen16 = allocated_between(between, end, MemoryCategory::frozen_weights);
  EXPECT_EQ(bf16_model.parameters().dtype(), DType::bf16);
  EXPECT_EQ(bf16_model.parameters().group(1).dtype, DType::bf16);
  EXPECT_FALSE(bf16_model.gradients().has_storage(1));
  // Every base tensor takes 2 bytes instead of 4; the norms add small f32 copies.
  const int64_t norm_copies = (2 * config.n_layers + 1) * config.dim * sizeof(float);
  EXPECT_EQ(frozen16, frozen32 / 2 + norm_copies);
  EXPECT_EQ(bf16_model.trainable().layout().total_params(),
            f32_model.trainable().layout().total_params());
  std::printf("[lora] frozen base bytes: f32 %lld, bf16 %lld; trainable %lld, gradients %lld\n",
              static_cast<long long>(frozen32), static_cast<long long>(frozen16),
              static_cast<long long>(
                  allocated_between(between, end, MemoryCategory::trainable_weights)),
              static_cast<long long>(allocated_between(between, end, MemoryCategory::gradients)));

  bf16_model.init_weights(71);
  bf16_model.init_lora(72);
  // get_parameter reads back the bf16-rounded base (norms of 1 are exact in bf16).
  std::vector<float> norm(32);
  bf16_model.get_parameter(bf16_model.parameters().layout().index_of(
                               "model.layers.0.input_layernorm.weight"),
                           norm.data());
  EXPECT_EQ(norm[0], 1.0f);
  std::vector<float> wq(static_cast<size_t>(config.q_dim() * config.dim));
  bf16_model.get_parameter(
      bf16_model.parameters().layout().index_of("model.layers.0.self_attn.q_proj.weight"),
      wq.data());
  for (float v : wq) ASSERT_EQ(v, round_to_bf16(v));

  HostBatch batch = HostBatch::from_tokens(make_tokens(2, 16, 64, 9), 2, 16);
  Batch view = batch.view();
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 8; ++step) {
    bf16_model.trainable_gradients().zero();
    const LossSum loss = bf16_model.forward_backward(view, 1.0f / 30.0f);
    if (step == 0) first = loss.mean();
    last = loss.mean();
    ParameterSet& params = bf16_model.trainable();
    for (int g = 0; g < params.group_count(); ++g)
      backend->axpy(-0.5f, bf16_model.trainable_gradients().group(g), params.group(g));
  }
  std::printf("[lora] bf16 base training: loss %.4f -> %.4f\n", first, last);
  EXPECT_LT(last, first - 0.05);
}

TEST(LoraModelTest, Bf16BaseComputesWhatAnF32BaseOfTheSameValuesComputes) {
  auto backend = make_backend("cpu");
  LlamaConfig tied_with_bias = tiny_config();
  tied_with_bias.tie_embeddings = true;
  tied_with_bias.attention_bias = true;
  for (const LlamaConfig& config : {tiny_config(), tied_with_bias}) {
    LlamaModel f32_model(config, *backend, lora_options(all_targets_lora()));
    LlamaModel bf16_model(config, *backend, lora_options(all_targets_lora(), DType::bf16));
    // An f32 base computing in bf16 (through compute-dtype copies of its matrices).
    ModelOptions f32_base_options = lora_options(all_targets_lora(), DType::bf16);
    f32_base_options.lora_base_dtype = DType::f32;
    LlamaModel f32_base_bf16_compute(config, *backend, f32_base_options);
    // Every model holds the same base values: the bf16 store rounds them, so the f32 bases
    // get the rounded values too (what a bf16 checkpoint holds).
    bf16_model.init_weights(81);
    const int count = static_cast<int>(bf16_model.parameters().layout().params().size());
    for (int i = 0; i < count; ++i) {
      std::vector<float> values(
          static_cast<size_t>(bf16_model.parameters().layout().params()[i].numel()));
      bf16_model.get_parameter(i, values.data());
      f32_model.set_parameter(i, values.data());
      f32_base_bf16_compute.set_parameter(i, values.data());
    }
    randomize_adapters(f32_model, 82, 0.2);
    randomize_adapters(bf16_model, 82, 0.2);
    randomize_adapters(f32_base_bf16_compute, 82, 0.2);
    HostBatch batch = HostBatch::from_tokens(make_tokens(2, 16, 64, 10), 2, 16);
    const std::vector<float> a = logits_of(f32_model, batch);
    const std::vector<float> b = logits_of(bf16_model, batch);
    // Holding those values in bf16 instead of f32 changes nothing a bf16 model computes (how
    // far bf16 compute is from f32 compute is mixed_precision_test's subject).
    EXPECT_TRUE(bitwise_equal(logits_of(f32_base_bf16_compute, batch), b));
    EXPECT_FALSE(bitwise_equal(a, b));
    // Training a frozen base with biases and a tied head touches only the adapters.
    Batch view = batch.view();
    bf16_model.trainable_gradients().zero();
    bf16_model.forward_backward(view, 0.05f);
    EXPECT_TRUE(backend->all_finite(bf16_model.trainable_gradients().group(1)));
    EXPECT_GT(backend->sum_squares(bf16_model.trainable_gradients().group(1)), 0.0);
  }
}

TEST(LoraModelTest, IncrementalDecodingAppliesAdapters) {
  auto backend = make_backend("cpu");
  LlamaModel model(tiny_config(), *backend, lora_options(all_targets_lora()));
  model.init_weights(91);
  randomize_adapters(model, 92, 0.3);
  HostBatch batch = HostBatch::from_tokens(make_tokens(1, 6, 64, 11), 1, 6);
  const std::vector<float> full = logits_of(model, batch);
  KvCache cache(model.config(), *backend, 1, 6);
  std::vector<float> step_logits(64);
  Tensor out = host_view(step_logits, DType::f32, Shape{1, 64});
  std::vector<int32_t> prompt(batch.tokens.begin(), batch.tokens.begin() + 5);
  model.forward_step(host_view(prompt, DType::i32, Shape{1, 5}), cache, out);
  std::vector<int32_t> next = {batch.tokens[5]};
  model.forward_step(host_view(next, DType::i32, Shape{1, 1}), cache, out);
  const std::vector<float> last(full.end() - 64, full.end());
  EXPECT_LE(max_abs_error(step_logits, last), 1e-4);
}

TEST(LoraModelTest, RejectsBadOptions) {
  auto backend = make_backend("cpu");
  LoraOptions unknown = all_targets_lora();
  unknown.targets.push_back("lm_head");
  EXPECT_THROW(LlamaModel(tiny_config(), *backend, lora_options(unknown)), Error);
  LoraOptions duplicate = all_targets_lora();
  duplicate.targets.push_back("q_proj");
  EXPECT_THROW(LlamaModel(tiny_config(), *backend, lora_options(duplicate)), Error);
  LoraOptions bad_dropout = all_targets_lora(4, 8.0f, 1.0f);
  EXPECT_THROW(LlamaModel(tiny_config(), *backend, lora_options(bad_dropout)), Error);
  LlamaModel plain(tiny_config(), *backend, lora_options(LoraOptions{}));
  EXPECT_THROW(plain.merge_lora(), Error);
  LlamaModel bf16(tiny_config(), *backend, lora_options(all_targets_lora(), DType::bf16));
  EXPECT_THROW(bf16.merge_lora(), Error);
}

}  // namespace
}  // namespace anvil::test
