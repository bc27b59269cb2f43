// Loss scaling and fp16, end to end. Dynamic loss scaling multiplies the loss by a power of two,
// so without an overflow it changes nothing (bitwise); in fp16 a scale too large for
// fp16's range overflows the gradients: the step is skipped, the scale halves, and after
// growth_interval clean steps it doubles again. The scaler's state is checkpointed, so a run
// resumed across skips repeats the straight run. The fp16 loss curve tracks f32's, and fp16 on
// the optimized kernels (cpu, and sim, the simulated device that runs them) tracks cpu-ref's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "easy_corpus.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::deterministic_metrics;
using testing_support::kEasyCorpusModel;
using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

class TrainLossScaleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(scratch_dir("loss_scale"));
    testing_support::write_easy_corpus(*root_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }

  // The easy corpus on `backend` (the reference loops unless asked).
  static std::string easy_args(const std::string& backend = "cpu-ref") {
    return std::string(kEasyCorpusModel) + " --backend " + backend + " --model.vocab_size=300 " +
           "--data.path=" + (*root_ / "data").string() +
           " --optimizer.lr=1e-2 --training.eval_every=10";
  }

  static std::vector<nlohmann::json> records(const fs::path& run, const std::string& type) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto record = nlohmann::json::parse(line);
      if (record["type"] == type) out.push_back(record);
    }
    return out;
  }

  static fs::path* root_;
};

fs::path* TrainLossScaleTest::root_ = nullptr;

TEST_F(TrainLossScaleTest, ScalingWithoutOverflowIsBitwiseTheUnscaledRun) {
  const std::string settings = tiny_synthetic_args() + " --training.steps=8";
  const auto plain = run_anvil("train --run-dir " + (*root_ / "plain").string() + " " + settings);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  // 2^20, doubling after every 2 clean steps, reaches 2^23 at step 8: far from f32's range,
  // so nothing overflows.
  const auto scaled = run_anvil("train --run-dir " + (*root_ / "scaled").string() + " " +
                                settings +
                                " --training.loss_scale=dynamic --training.loss_scale_init=1048576"
                                " --training.loss_scale_growth_interval=2");
  ASSERT_EQ(scaled.exit_code, 0) << scaled.output;
  const auto scales = records(*root_ / "scaled", "train");
  ASSERT_EQ(scales.size(), 8u);
  EXPECT_EQ(scales[0]["loss_scale"], 1048576.0);
  EXPECT_EQ(scales[2]["loss_scale"], 2097152.0);
  EXPECT_EQ(scales[7]["loss_scale"], 8388608.0);
  EXPECT_EQ(scales[7]["skipped_steps"], 0);
  std::vector<std::string> without_scale;
  for (const std::string& line : deterministic_metrics(*root_ / "scaled")) {
    without_scale.push_back(std::regex_replace(line, std::regex(R"(,"loss_scale":[0-9.e+]+)"), ""));
  }
  EXPECT_EQ(without_scale, deterministic_metrics(*root_ / "plain"));
}

TEST_F(TrainLossScaleTest, Fp16OverflowsAreSkippedTheScaleHalvesAndRecovers) {
  const fs::path run = *root_ / "overflow";
  const auto result = run_anvil("train --run-dir " + run.string() + " " + easy_args() +
                                " --training.steps=30 --training.dtype=fp16"
                                " --training.loss_scale=dynamic --training.loss_scale_init=16777216"
                                " --training.loss_scale_growth_interval=4");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("[train] step 1: gradients overflowed at loss scale 16777216"),
            std::string::npos)
      << result.output;
  const auto train = records(run, "train");
  ASSERT_EQ(train.size(), 30u);
  // Step 1 runs at 2^24, which fp16 gradients cannot hold. A skipped step (its loss finite,
  // its gradients not) halves the scale of the next; a clean one keeps it or, after
  // growth_interval clean steps in a row, doubles it.
  EXPECT_EQ(train[0]["skipped_steps"], 1);
  EXPECT_TRUE(train[0]["loss"].is_number());
  int growths = 0;
  for (size_t j = 0; j + 1 < train.size(); ++j) {
    const int before = j == 0 ? 0 : train[j - 1]["skipped_steps"].get<int>();
    const bool skipped = train[j]["skipped_steps"].get<int>() > before;
    const double scale = train[j]["loss_scale"], next = train[j + 1]["loss_scale"];
    if (skipped) {
      EXPECT_EQ(next, scale / 2) << "step " << j + 1 << " was skipped";
    } else {
      EXPECT_TRUE(next == scale || next == 2 * scale) << "step " << j + 1 << ": " << scale
                                                      << " -> " << next;
      growths += next == 2 * scale;
    }
  }
  EXPECT_GE(growths, 1) << "the scale never grew back after clean steps";
  const int total_skipped = train.back()["skipped_steps"];
  EXPECT_GE(total_skipped, 2);
  EXPECT_LT(total_skipped, 15);
  // It recovered and learnt: far below a fresh model's log(300) = 5.7.
  EXPECT_LT(records(run, "eval").back()["loss"].get<double>(), 3.0);
  const auto state = nlohmann::json::parse(
      std::ifstream(run / "checkpoints" / "step-0000030" / "train_state.json"));
  EXPECT_EQ(state["skipped_steps"], total_skipped);
  EXPECT_EQ(state["optimizer_step"], 30 - total_skipped);
  EXPECT_TRUE(state["loss_scale"]["scale"].is_number());
}

// fp16 keeps 11 significant bits to bf16's 8: measured, its per-step loss stays within 4.2e-4
// (relative) of the f32 run over these 30 steps while bf16's drifts by 2.5e-2. The bound
// 5e-3 holds fp16 with room and would fail bf16.
TEST_F(TrainLossScaleTest, Fp16LossCurveTracksF32) {
  const std::string settings = easy_args() + " --training.steps=30";
  const auto f32 = run_anvil("train --run-dir " + (*root_ / "f32").string() + " " + settings);
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  const auto f16 = run_anvil("train --run-dir " + (*root_ / "f16").string() + " " + settings +
                             " --training.dtype=fp16 --training.loss_scale=dynamic"
                             " --training.loss_scale_init=1024"
                             " --training.loss_scale_growth_interval=10");
  ASSERT_EQ(f16.exit_code, 0) << f16.output;
  const auto a = records(*root_ / "f32", "train");
  const auto b = records(*root_ / "f16", "train");
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  EXPECT_EQ(b.back()["skipped_steps"], 0);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ref = a[i]["loss"], got = b[i]["loss"];
    worst = std::max(worst, std::abs(got - ref) / ref);
  }
  EXPECT_LE(worst, 5e-3);
  EXPECT_LT(a.back()["loss"].get<double>(), a.front()["loss"].get<double>() - 2.0);
  std::printf("fp16 vs f32: worst per-step relative loss difference %.3g over 30 steps\n", worst);
}

// fp16 on the optimized kernels (f16 storage, f32 arithmetic, one rounding per stored value)
// and on the reference loops round at the same points but sum in different orders (SIMD lanes,
// blocked GEMMs), so single f16 roundings (2^-11 relative) differ now and then and compound.
// Without overflows (scale 1024) the measured worst per-step relative loss difference to
// cpu-ref over 30 steps is 9.0e-5 on the avx512 table, 1.8e-4 on avx2 and 2.3e-4 on generic
// (bf16 on avx512: 2.2e-2); the bound 1e-3 holds every table with a 4x margin and would fail
// bf16. Starting at 2^24 the first steps overflow
// and are skipped: every backend must skip the same steps and follow the same scales. The first
// applied steps then run at scales near the top of fp16's range and at the schedule's largest
// learning rate, which amplifies the differing roundings (measured up to 4.3e-3), so that run
// is held to the skips, the scales and learning. sim runs the cpu kernels on one stream, so it
// repeats cpu bit for bit in both.
TEST_F(TrainLossScaleTest, Fp16OnTheOptimizedKernelsAndSimTracksTheReference) {
  const std::string fp16 =
      " --training.steps=30 --training.dtype=fp16 --training.loss_scale=dynamic"
      " --training.loss_scale_growth_interval=10";
  const std::vector<std::string> backends = {"cpu-ref", "cpu", "sim"};
  for (const std::string init : {"1024", "16777216"}) {
    std::map<std::string, std::vector<nlohmann::json>> runs;
    for (const std::string& backend : backends) {
      const fs::path run = *root_ / ("fp16-" + backend + "-" + init);
      const auto result = run_anvil("train --run-dir " + run.string() + " " +
                                    easy_args(backend) + fp16 +
                                    " --training.loss_scale_init=" + init);
      ASSERT_EQ(result.exit_code, 0) << backend << "\n" << result.output;
      runs[backend] = records(run, "train");
      ASSERT_EQ(runs[backend].size(), 30u) << backend;
    }
    const auto& ref = runs["cpu-ref"];
    const auto& cpu = runs["cpu"];
    const auto& sim = runs["sim"];
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double want = ref[i]["loss"], got = cpu[i]["loss"];
      worst = std::max(worst, std::abs(got - want) / want);
      EXPECT_EQ(sim[i]["loss"], cpu[i]["loss"]) << "init " << init << " step " << i + 1;
      EXPECT_EQ(cpu[i]["loss_scale"], ref[i]["loss_scale"]) << "init " << init << " step " << i + 1;
      EXPECT_EQ(cpu[i]["skipped_steps"], ref[i]["skipped_steps"])
          << "init " << init << " step " << i + 1;
    }
    std::printf("fp16 from scale %s, cpu vs cpu-ref: worst per-step relative loss difference "
                "%.3g over 30 steps, %d skipped\n",
                init.c_str(), worst, cpu.back()["skipped_steps"].get<int>());
    if (init == "1024") {
      EXPECT_EQ(cpu.back()["skipped_steps"], 0);
      EXPECT_LE(worst, 1e-3);
    } else {
      EXPECT_GE(cpu.back()["skipped_steps"].get<int>(), 2);
    }
    EXPECT_LT(cpu.back()["loss"].get<double>(), cpu.front()["loss"].get<double>() - 2.0);
  }
}

TEST_F(TrainLossScaleTest, AResumedRunRestoresTheScaleAndRepeatsTheStraightRun) {
  const std::string settings = easy_args() +
                               " --training.dtype=fp16 --training.loss_scale=dynamic"
                               " --training.loss_scale_init=16777216"
                               " --training.loss_scale_growth_interval=3"
                               " --optimizer.schedule=constant --checkpoint.every=2"
                               " --training.eval_every=2";
  const auto straight = run_anvil("train --run-dir " + (*root_ / "straight").string() + " " +
                                  settings + " --training.steps=14");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const auto first = run_anvil("train --run-dir " + (*root_ / "legs").string() + " " + settings +
                               " --training.steps=6");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run_anvil("train --run-dir " + (*root_ / "legs").string() + " " +
                                settings + " --training.steps=14");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  EXPECT_EQ(deterministic_metrics(*root_ / "legs"), deterministic_metrics(*root_ / "straight"));
}

TEST(TrainLossScaleErrors, BadSettingsAreOneLineAndLeaveNoRunFolder) {
  const fs::path root = scratch_dir("loss_scale_errors");
  struct Case {
    std::string flags, message;
  };
  const Case cases[] = {
      {"--training.loss_scale=static", "training.loss_scale must be off or dynamic"},
      {"--training.loss_scale=dynamic --training.loss_scale_init=1000",
       "training.loss_scale_init must be a power of two"},
      {"--training.dtype=f16", "training.dtype must be f32, bf16 or fp16"},
  };
  for (const Case& c : cases) {
    const fs::path run = root / "run";
    const auto result = run_anvil("train --run-dir " + run.string() + " " + tiny_synthetic_args() +
                                  " --training.steps=2 " + c.flags);
    EXPECT_NE(result.exit_code, 0) << c.flags;
    EXPECT_NE(result.output.find(c.message), std::string::npos) << c.flags << "\n" << result.output;
    EXPECT_FALSE(fs::exists(run)) << c.flags << " left a run folder";
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace anvil
