// Golden test: anvil's Llama against PyTorch. tools/golden/make_llama_golden.py writes, for two
// tiny models (Llama 3 style with GQA; Qwen2 style with q/k/v bias, tied embeddings, Llama 3.1
// rope scaling, a document mask and a loss mask), the weights, a batch, the logits, the loss,
// every parameter gradient and ten AdamW steps. Here each is recomputed on the cpu-ref and cpu
// backends and compared by name; the steps run through optim's AdamW, LrSchedule and clipping.
// Activation checkpointing must reproduce the gradients bit for bit.
// Tolerance: max |anvil - torch| <= 1e-5 * max |torch| per tensor (both compute in f32).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numbers>
#include <ostream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/llama.h"
#include "model_test_util.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"

namespace anvil::test {
namespace {

constexpr double kTolerance = 1e-5;

struct GoldenParam {
  const char* file;
  const char* backend;
};

void PrintTo(const GoldenParam& param, std::ostream* os) {
  *os << param.file << " on " << param.backend;
}

std::string golden_path(const char* file) {
  return std::string(ANVIL_MODEL_GOLDEN_DIR) + "/" + file + ".safetensors";
}

LlamaConfig config_from_metadata(const SafetensorsFile& file) {
  const nlohmann::json j = nlohmann::json::parse(file.metadata().at("config"));
  LlamaConfig c;
  c.dim = j.at("dim");
  c.n_layers = j.at("n_layers");
  c.n_heads = j.at("n_heads");
  c.n_kv_heads = j.at("n_kv_heads");
  c.head_dim = j.at("head_dim");
  c.ffn_dim = j.at("ffn_dim");
  c.vocab_size = j.at("vocab_size");
  c.max_seq_len = j.at("max_seq_len");
  c.rope_theta = j.at("rope_theta");
  c.rope_scaling_factor = j.at("rope_scaling_factor");
  c.rope_low_freq_factor = j.at("rope_low_freq_factor");
  c.rope_high_freq_factor = j.at("rope_high_freq_factor");
  c.rope_original_max_position = j.at("rope_original_max_position");
  c.norm_eps = j.at("norm_eps");
  c.tie_embeddings = j.at("tie_embeddings");
  c.attention_bias = j.at("attention_bias");
  return c;
}

std::vector<float> read_floats(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsEntry& entry = file.at(name);
  std::vector<float> out(static_cast<size_t>(entry.numel()));
  entry.read_f32(out);
  return out;
}

std::vector<int32_t> read_ints(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsEntry& entry = file.at(name);
  std::vector<int32_t> out(static_cast<size_t>(entry.numel()));
  std::memcpy(out.data(), entry.data, entry.nbytes());
  return out;
}

// The golden file's inputs held in host vectors, with a Batch viewing them.
struct GoldenInputs {
  std::vector<int32_t> tokens, targets, doc_ids;
  std::vector<float> loss_mask;
  Tensor loss_mask_view, doc_ids_view;
  Batch batch;
  int64_t count = 0;

  explicit GoldenInputs(const SafetensorsFile& file) {
    const std::vector<int64_t>& shape = file.at("input.tokens").shape;
    const Shape bt{shape[0], shape[1]};
    tokens = read_ints(file, "input.tokens");
    targets = read_ints(file, "input.targets");
    batch.tokens = host_view(tokens, DType::i32, bt);
    batch.targets = host_view(targets, DType::i32, bt);
    if (file.contains("input.loss_mask")) {
      loss_mask = read_floats(file, "input.loss_mask");
      loss_mask_view = host_view(loss_mask, DType::f32, bt);
      batch.loss_mask = &loss_mask_view;
    }
    if (file.contains("input.doc_ids")) {
      doc_ids = read_ints(file, "input.doc_ids");
      doc_ids_view = host_view(doc_ids, DType::i32, bt);
      batch.doc_ids = &doc_ids_view;
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i] != kIgnoreIndex && (loss_mask.empty() || loss_mask[i] != 0.0f)) ++count;
    }
  }
};

void load_weights(const SafetensorsFile& file, LlamaModel& model) {
  const ParameterLayout& layout = model.parameters().layout();
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParameterInfo& info = layout.params()[i];
    const SafetensorsEntry& entry = file.at(info.name);
    ASSERT_EQ(entry.numel(), info.numel()) << info.name;
    model.backend().copy_from_host(model.parameters().tensor(static_cast<int>(i)), entry.data);
  }
}

// Returns one optimizer group per parameter group, with one decay span per parameter and
// non-decayed spans over the alignment padding, so the spans tile each group.
std::vector<OptimizerGroup> optimizer_groups(LlamaModel& model) {
  const ParameterLayout& layout = model.parameters().layout();
  std::vector<OptimizerGroup> groups(static_cast<size_t>(layout.group_count()));
  std::vector<int64_t> next(groups.size(), 0);
  for (const ParameterInfo& info : layout.params()) {
    std::vector<ParamSpan>& spans = groups[static_cast<size_t>(info.group)].spans;
    int64_t& end = next[static_cast<size_t>(info.group)];
    if (info.offset > end) spans.push_back({end, info.offset - end, false});
    spans.push_back({info.offset, info.numel(), info.weight_decay});
    end = info.offset + info.numel();
  }
  for (int g = 0; g < layout.group_count(); ++g) {
    OptimizerGroup& group = groups[static_cast<size_t>(g)];
    group.params = model.parameters().group(g);
    group.grads = model.gradients().group(g);
    const int64_t end = next[static_cast<size_t>(g)];
    if (end < layout.group_numel(g))
      group.spans.push_back({end, layout.group_numel(g) - end, false});
  }
  return groups;
}

class GoldenTest : public ::testing::TestWithParam<GoldenParam> {
 protected:
  void SetUp() override {
    file_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(golden_path(GetParam().file)));
    config_ = config_from_metadata(*file_);
    backend_ = make_backend(GetParam().backend);
    inputs_ = std::make_unique<GoldenInputs>(*file_);
  }

  std::unique_ptr<LlamaModel> make_model(bool checkpointing, int64_t chunk_rows = 0) {
    ModelOptions options;
    options.max_batch = static_cast<int>(inputs_->batch.tokens.shape[0]);
    options.max_seq = static_cast<int>(inputs_->batch.tokens.shape[1]);
    options.activation_checkpointing = checkpointing;
    options.logits_chunk_rows = chunk_rows;
    auto model = std::make_unique<LlamaModel>(config_, *backend_, options);
    load_weights(*file_, *model);
    return model;
  }

  // Runs one forward_backward of the golden batch at mean-loss scale; returns the mean loss.
  double mean_loss_and_grads(LlamaModel& model) {
    model.gradients().zero();
    const LossSum loss =
        model.forward_backward(inputs_->batch, 1.0f / static_cast<float>(inputs_->count));
    EXPECT_EQ(loss.count, inputs_->count);
    return loss.mean();
  }

  // Checks every gradient against the file; returns the worst relative error.
  double check_gradients(LlamaModel& model, bool print) {
    double worst = 0.0;
    const ParameterLayout& layout = model.gradients().layout();
    for (size_t i = 0; i < layout.params().size(); ++i) {
      const std::string& name = layout.params()[i].name;
      const std::vector<float> got =
          to_host(*backend_, model.gradients().tensor(static_cast<int>(i)));
      const double err = relative_max_error(got, read_floats(*file_, "grad." + name));
      if (print) std::printf("    grad %-48s rel max err %.2e\n", name.c_str(), err);
      EXPECT_LE(err, kTolerance) << "gradient of " << name;
      worst = std::max(worst, err);
    }
    return worst;
  }

  std::unique_ptr<SafetensorsFile> file_;
  LlamaConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<GoldenInputs> inputs_;
};

TEST_P(GoldenTest, LogitsLossAndGradientsMatchPyTorch) {
  auto model = make_model(false);
  const std::vector<int64_t>& logit_shape = file_->at("output.logits").shape;
  Buffer logits_buffer(
      *backend_,
      static_cast<size_t>(logit_shape[0] * logit_shape[1] * logit_shape[2]) * sizeof(float),
      MemoryCategory::workspace);
  const Tensor logits =
      logits_buffer.as(DType::f32, Shape{logit_shape[0], logit_shape[1], logit_shape[2]});
  model->forward_logits(inputs_->batch.tokens, logits, inputs_->batch.doc_ids);
  const double logits_err =
      relative_max_error(to_host(*backend_, logits), read_floats(*file_, "output.logits"));
  EXPECT_LE(logits_err, kTolerance);

  const double loss = mean_loss_and_grads(*model);
  const double want = read_floats(*file_, "output.loss")[0];
  std::printf("  [%s on %s] loss %.7f (torch %.7f), logits rel max err %.2e\n", GetParam().file,
              GetParam().backend, loss, want, logits_err);
  EXPECT_NEAR(loss, want, kTolerance * want);
  const double worst = check_gradients(*model, true);
  std::printf("  worst gradient rel max err %.2e\n", worst);

  const LossSum eval = model->forward_loss(inputs_->batch);
  EXPECT_EQ(eval.count, inputs_->count);
  EXPECT_NEAR(eval.mean(), want, kTolerance * want);
}

TEST_P(GoldenTest, ActivationCheckpointingGivesBitwiseEqualGradients) {
  auto plain = make_model(false);
  auto checkpointed = make_model(true);
  const double loss_plain = mean_loss_and_grads(*plain);
  const double loss_checkpointed = mean_loss_and_grads(*checkpointed);
  EXPECT_EQ(loss_plain, loss_checkpointed);
  EXPECT_TRUE(bitwise_equal(all_gradients(*plain), all_gradients(*checkpointed)));
  EXPECT_LT(checkpointed->activation_bytes(), plain->activation_bytes());
}

TEST_P(GoldenTest, ChunkedHeadMatchesPyTorch) {
  auto model = make_model(false, 5);  // 32 rows in chunks of 5: the last one is partial
  const double loss = mean_loss_and_grads(*model);
  const double want = read_floats(*file_, "output.loss")[0];
  EXPECT_NEAR(loss, want, kTolerance * want);
  check_gradients(*model, false);
}

TEST_P(GoldenTest, TenAdamWStepsMatchPyTorch) {
  const nlohmann::json train = nlohmann::json::parse(file_->metadata().at("train"));
  const std::vector<float> want_losses = read_floats(*file_, "train.losses");
  const std::vector<float> want_lrs = read_floats(*file_, "train.lrs");
  const std::vector<float> want_norms = read_floats(*file_, "train.grad_norms");
  auto model = make_model(false);
  const std::vector<OptimizerGroup> groups = optimizer_groups(*model);
  AdamWHyperParams hyper;
  hyper.beta1 = train.at("beta1");
  hyper.beta2 = train.at("beta2");
  hyper.eps = train.at("eps");
  hyper.weight_decay = train.at("weight_decay");
  AdamW adamw(*backend_, groups, hyper);
  LrSchedule schedule;
  schedule.kind = LrScheduleKind::cosine;
  schedule.peak_lr = train.at("lr");
  schedule.min_lr = schedule.peak_lr * double(train.at("min_lr_ratio"));
  schedule.warmup_steps = train.at("warmup_steps");
  schedule.total_steps = train.at("steps");
  double worst_loss = 0.0, worst_norm = 0.0;
  for (int step = 1; step <= schedule.total_steps; ++step) {
    const size_t i = static_cast<size_t>(step - 1);
    const double loss = mean_loss_and_grads(*model);
    const double norm = global_grad_norm(*backend_, groups);
    const double lr = schedule.lr_at(step);
    EXPECT_EQ(static_cast<float>(lr), want_lrs[i]) << "schedule at step " << step;
    const double loss_err = std::fabs(loss - want_losses[i]) / want_losses[i];
    const double norm_err = std::fabs(norm - want_norms[i]) / want_norms[i];
    EXPECT_LE(loss_err, kTolerance) << "loss at step " << step;
    EXPECT_LE(norm_err, kTolerance) << "grad norm at step " << step;
    worst_loss = std::max(worst_loss, loss_err);
    worst_norm = std::max(worst_norm, norm_err);
    adamw.step(lr, clip_coefficient(norm, train.at("grad_clip")));
  }
  std::printf(
      "  [%s on %s] 10 AdamW steps: loss %.6f -> %.6f, worst rel err loss %.2e, "
      "grad norm %.2e\n",
      GetParam().file, GetParam().backend, want_losses.front(), want_losses.back(), worst_loss,
      worst_norm);
}

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenTest,
    ::testing::Values(GoldenParam{"llama_tiny", "cpu-ref"}, GoldenParam{"llama_tiny", "cpu"},
                      GoldenParam{"qwen2_tiny", "cpu-ref"}, GoldenParam{"qwen2_tiny", "cpu"}),
    [](const ::testing::TestParamInfo<GoldenParam>& info) {
      std::string name = std::string(info.param.file) + "_" + info.param.backend;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

}  // namespace
}  // namespace anvil::test
