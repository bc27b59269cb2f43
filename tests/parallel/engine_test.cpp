// DataParallelEngine in one process: stage 0 with one micro-batch is the plain model + AdamW
// loop the trainer ran before the engine existed; every stage computes the same bits as stage
// 0 (sharding at world size 1 only moves memory around); evaluation and the memory report.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "optim/adamw.h"
#include "parallel/shard_plan.h"
#include "parallel/sharding_report.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Curve;
using ptest::describe_memory;
using ptest::expected_setup_memory;
using ptest::Harness;
using ptest::RunSpec;

TEST(EngineSingleProcess, StageZeroMatchesThePlainTrainingLoop) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  spec.grad_clip = 0.0;  // the plain loop's norm is a floating-point sum; keep it out of the step
  Harness harness(*comm, spec);
  harness.engine().init_weights(spec.seed);

  auto backend = make_backend("cpu");
  ModelOptions options;
  options.max_batch = spec.micro_batch;
  options.max_seq = spec.seq;
  LlamaModel plain(ptest::tiny_config(spec.tied), *backend, options);
  plain.init_weights(spec.seed);
  std::vector<OptimizerGroup> groups;
  const auto spans = layout_decay_spans(plain.parameters().layout());
  for (int g = 0; g < plain.parameters().group_count(); ++g) {
    groups.push_back({plain.parameters().group(g), plain.gradients().group(g), spans[g], {}});
  }
  AdamWHyperParams hyper;
  hyper.weight_decay = 0.1;
  AdamW optimizer(*backend, groups, hyper);
  SyntheticData data(64, spec.seq, spec.seed);
  std::vector<int32_t> tokens(spec.micro_batch * spec.seq), targets(tokens.size());
  std::vector<float> mask(tokens.size());
  const Shape shape{spec.micro_batch, spec.seq};
  const Tensor t(tokens.data(), DType::i32, shape), y(targets.data(), DType::i32, shape);
  const Tensor w(mask.data(), DType::f32, shape);

  for (int64_t k = 0; k < 6; ++k) {
    const StepReport report = harness.step(k);
    data.fill(k * spec.micro_batch, spec.micro_batch, t, y, nullptr, &w);
    const Batch batch{t, y, &w, nullptr};
    plain.gradients().zero();
    const int64_t counted = plain.count_loss_tokens(batch);
    const LossSum loss =
        plain.forward_backward(batch, static_cast<float>(1.0 / static_cast<double>(counted)));
    const double norm = global_grad_norm(*backend, groups);
    optimizer.step(spec.lr, 1.0);
    EXPECT_EQ(ptest::bits(report.loss.mean()), ptest::bits(loss.mean())) << "step " << k;
    EXPECT_NEAR(report.grad_norm, norm, 1e-12 * norm) << "step " << k;
  }
  std::vector<float> expected;
  for (int g = 0; g < plain.parameters().group_count(); ++g) {
    const Tensor group = plain.parameters().group(g);
    expected.insert(expected.end(), group.f32(), group.f32() + group.numel());
  }
  EXPECT_TRUE(ptest::same_bits(harness.all_weights(), expected));
}

struct StageCase {
  int stage;
  int grad_accum;
  bool tied;
  int lora_r = 0;  // > 0: LoRA adapters on a frozen base
  DType dtype = DType::f32;
};

// Names a case in test listings: "stage3_accum2_tied", "stage3_accum1_tied_lora_bf16".
std::string stage_case_name(const ::testing::TestParamInfo<StageCase>& info) {
  const StageCase& c = info.param;
  return "stage" + std::to_string(c.stage) + "_accum" + std::to_string(c.grad_accum) +
         (c.tied ? "_tied" : "_untied") + (c.lora_r > 0 ? "_lora" : "") +
         (c.dtype == DType::bf16 ? "_bf16" : "");
}

class EveryStageAtWorldOne : public ::testing::TestWithParam<StageCase> {};

TEST_P(EveryStageAtWorldOne, MatchesStageZeroBitForBit) {
  const StageCase param = GetParam();
  auto comm = make_single_process_communicator();
  RunSpec spec;
  spec.grad_accum = param.grad_accum;
  spec.tied = param.tied;
  spec.lora_r = param.lora_r;
  spec.dtype = param.dtype;
  Harness reference(*comm, spec);
  reference.init(spec.seed);
  spec.zero_stage = param.stage;
  Harness sharded(*comm, spec);
  sharded.init(spec.seed);
  const Curve want = ptest::run_steps(reference, 0, 8);
  const Curve got = ptest::run_steps(sharded, 0, 8);
  EXPECT_EQ(got.loss_bits, want.loss_bits);
  EXPECT_EQ(got.norm_bits, want.norm_bits);
  EXPECT_TRUE(ptest::same_bits(sharded.all_weights(), reference.all_weights()));
  const LossSum eval_want = reference.evaluate(3);
  const LossSum eval_got = sharded.evaluate(3);
  EXPECT_EQ(ptest::bits(eval_got.sum), ptest::bits(eval_want.sum));
  EXPECT_EQ(eval_got.count, eval_want.count);
}

INSTANTIATE_TEST_SUITE_P(Stages, EveryStageAtWorldOne,
                         ::testing::Values(StageCase{1, 1, true}, StageCase{2, 1, true},
                                           StageCase{3, 1, true}, StageCase{3, 1, false},
                                           StageCase{1, 3, false}, StageCase{2, 3, true},
                                           StageCase{3, 3, true}, StageCase{3, 2, false}),
                         stage_case_name);
// Mixed precision: stage 3 gathers bf16 layers (f32 norms, f32 embedding table) into slots.
INSTANTIATE_TEST_SUITE_P(
    Bf16, EveryStageAtWorldOne,
    ::testing::Values(StageCase{3, 1, true, 0, DType::bf16}, StageCase{3, 2, false, 0, DType::bf16},
                      StageCase{2, 1, true, 0, DType::bf16}),
    stage_case_name);
// LoRA: the adapters train under every stage and stage 3 shards (and gathers) the base too.
INSTANTIATE_TEST_SUITE_P(
    Lora, EveryStageAtWorldOne,
    ::testing::Values(StageCase{1, 2, true, 4}, StageCase{2, 1, false, 4},
                      StageCase{3, 1, true, 4}, StageCase{3, 2, false, 4},
                      StageCase{2, 2, true, 4, DType::bf16}, StageCase{3, 1, false, 4, DType::bf16},
                      StageCase{3, 2, true, 4, DType::bf16}),
    stage_case_name);

TEST(EngineSingleProcess, ClippedStepsStillLearnARepeatedBatch) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  spec.grad_clip = 0.05;
  Harness harness(*comm, spec);
  harness.engine().init_weights(spec.seed);
  // Synthetic tokens are uniform noise, so only a batch seen again can be learnt.
  const StepReport first = harness.step(0);
  StepReport last;
  for (int i = 0; i < 15; ++i) last = harness.step(0);
  EXPECT_LT(last.clip_scale, 1.0);
  EXPECT_NEAR(last.clip_scale, 0.05 / (last.grad_norm + 1e-6), 1e-12);
  EXPECT_LT(last.loss.mean(), first.loss.mean() - 0.1);
}

TEST(EngineSingleProcess, EvaluationSumsEveryBatch) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  Harness harness(*comm, spec);
  harness.engine().init_weights(spec.seed);
  const LossSum total = harness.evaluate(4);
  EXPECT_EQ(total.count, 4 * spec.micro_batch * spec.seq);
  EXPECT_NEAR(total.mean(), std::log(64.0), 0.2);  // an untrained model guesses uniformly
}

TEST(EngineSingleProcess, MeasuredMemoryEqualsTheBytesOfTheParameterShapes) {
  auto comm = make_single_process_communicator();
  for (const int stage : {0, 3}) {
    for (const int grad_accum : {1, 2}) {
      RunSpec spec;
      spec.zero_stage = stage;
      spec.grad_accum = grad_accum;
      Harness harness(*comm, spec);
      const MemorySnapshot setup = harness.engine().memory();
      const MemoryByCategory expected = expected_setup_memory(spec, harness.model(), 1, 0);
      EXPECT_EQ(setup.current, expected)
          << "stage " << stage << ", " << grad_accum << " micro-batches: measured "
          << describe_memory(setup.current) << "; expected " << describe_memory(expected);
      if (stage == 0) {
        // One process, tied embeddings, no padding at these shapes: 4 bytes per parameter.
        const int64_t params = spec.config().param_count();
        EXPECT_EQ(setup.current_of(MemoryCategory::trainable_weights), 4 * params);
        EXPECT_EQ(setup.current_of(MemoryCategory::optimizer_state), 8 * params);
      }
      int64_t sum = 0;
      for (const int64_t bytes : setup.current) sum += bytes;
      EXPECT_EQ(setup.total, sum);
      EXPECT_EQ(setup.total_peak, setup.total);  // setup frees nothing it allocated

      // A step adds the backend's kernel scratch (workspace) and frees what it takes.
      harness.engine().init_weights(spec.seed);
      harness.step(0);
      const MemorySnapshot after = harness.engine().memory();
      for (MemoryCategory c : {MemoryCategory::trainable_weights, MemoryCategory::gradients,
                               MemoryCategory::optimizer_state, MemoryCategory::activations,
                               MemoryCategory::communication}) {
        EXPECT_EQ(after.current_of(c), setup.current_of(c)) << memory_category_name(c);
        EXPECT_EQ(after.peak_of(c), setup.current_of(c)) << memory_category_name(c);
      }
      EXPECT_GT(after.current_of(MemoryCategory::workspace), 0);
      EXPECT_GE(after.total_peak, after.total);
    }
  }
}

TEST(EngineSingleProcess, ShardingReportShowsTheMeasuredMemory) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  spec.zero_stage = 3;
  Harness stage3(*comm, spec);
  const ShardingReport report = sharding_report(stage3.engine());
  EXPECT_NE(report.text.find("memory per rank"), std::string::npos) << report.text;
  EXPECT_NE(report.text.find("layers.*.self_attn.q_proj"), std::string::npos) << report.text;
  const MemorySnapshot memory = stage3.engine().memory();
  ASSERT_EQ(report.json["memory_per_rank"].size(), 1u);
  const nlohmann::json& rank = report.json["memory_per_rank"][0];
  for (size_t c = 0; c < kMemoryCategoryNames.size(); ++c) {
    const std::string name(kMemoryCategoryNames[c]);
    EXPECT_EQ(rank[name].get<int64_t>(), memory.current[c]) << name;
    EXPECT_EQ(rank["peak"][name].get<int64_t>(), memory.peak[c]) << name;
  }
  EXPECT_EQ(rank["total"].get<int64_t>(), memory.total);
  EXPECT_EQ(rank["total_peak"].get<int64_t>(), memory.total_peak);
  EXPECT_GT(rank["communication"].get<int64_t>(), 0);  // the stage-3 slots
}

TEST(EngineSingleProcess, RejectsAModelBuiltForAnotherStage) {
  auto comm = make_single_process_communicator();
  auto backend = make_backend("cpu");
  ModelOptions options;
  options.max_seq = 16;
  LlamaModel model(ptest::tiny_config(true), *backend, options);  // allocates everything
  ParallelSettings settings;
  settings.zero_stage = 3;
  DeviceMesh mesh(*comm, settings);
  EXPECT_THROW(DataParallelEngine(model, mesh, EngineOptions{}), Error);
}

// Returns AdamW's m and v of every group, concatenated (this rank's shards).
std::vector<float> all_moments(Harness& harness) {
  std::vector<float> out;
  for (int g = 0; g < harness.engine().plan().group_count(); ++g) {
    for (int which = 0; which < 2; ++which) {
      const Tensor moment = harness.engine().moment(g, which);
      if (moment.defined()) out.insert(out.end(), moment.f32(), moment.f32() + moment.numel());
    }
  }
  return out;
}

class NonFiniteStepAtWorldOne : public ::testing::TestWithParam<StageCase> {};

// A NaN in one loss-mask value makes the step's loss and gradient norm NaN: the engine must
// apply nothing, and the same batch trained next (clean) must give exactly the step an
// unpoisoned run takes, so no NaN survives anywhere (gradient buffers, running sums, slots).
TEST_P(NonFiniteStepAtWorldOne, IsSkippedLeavingWeightsAndOptimizerStateBitIdentical) {
  const StageCase param = GetParam();
  auto comm = make_single_process_communicator();
  RunSpec spec;
  spec.zero_stage = param.stage;
  spec.grad_accum = param.grad_accum;
  spec.tied = param.tied;
  Harness poisoned(*comm, spec);
  poisoned.engine().init_weights(spec.seed);
  Harness clean(*comm, spec);
  clean.engine().init_weights(spec.seed);
  ptest::run_steps(poisoned, 0, 2);
  ptest::run_steps(clean, 0, 2);

  const std::vector<float> weights = poisoned.all_weights();
  const std::vector<float> moments = all_moments(poisoned);
  const int64_t optimizer_steps = poisoned.engine().optimizer_steps();
  const StepReport skipped = poisoned.step(2, /*poison=*/true);
  EXPECT_FALSE(skipped.applied);
  EXPECT_TRUE(std::isnan(skipped.loss.mean()));
  EXPECT_TRUE(std::isnan(skipped.grad_norm));
  EXPECT_TRUE(ptest::same_bits(poisoned.all_weights(), weights));
  EXPECT_TRUE(ptest::same_bits(all_moments(poisoned), moments));
  EXPECT_EQ(poisoned.engine().optimizer_steps(), optimizer_steps);

  const StepReport retried = poisoned.step(2);
  const StepReport want = clean.step(2);
  EXPECT_TRUE(retried.applied);
  EXPECT_TRUE(std::isfinite(retried.grad_norm));
  EXPECT_EQ(ptest::bits(retried.loss.mean()), ptest::bits(want.loss.mean()));
  EXPECT_EQ(ptest::bits(retried.grad_norm), ptest::bits(want.grad_norm));
  EXPECT_EQ(poisoned.engine().optimizer_steps(), optimizer_steps + 1);
  EXPECT_FALSE(ptest::same_bits(poisoned.all_weights(), weights));
  EXPECT_TRUE(ptest::same_bits(poisoned.all_weights(), clean.all_weights()));
  EXPECT_TRUE(ptest::same_bits(all_moments(poisoned), all_moments(clean)));
}

INSTANTIATE_TEST_SUITE_P(Stages, NonFiniteStepAtWorldOne,
                         ::testing::Values(StageCase{0, 1, true}, StageCase{0, 3, false},
                                           StageCase{1, 2, true}, StageCase{2, 3, true},
                                           StageCase{3, 1, false}, StageCase{3, 2, true}),
                         stage_case_name);

}  // namespace
}  // namespace anvil
