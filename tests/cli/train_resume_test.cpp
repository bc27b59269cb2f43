// Exact resume, end to end through the built binary: a run that stops and resumes writes the
// same metrics.jsonl, byte for byte (wall-clock fields aside), as a run that never stopped.
// Covers a plain "train 20, resume to 40", a crash after the last checkpoint (the metrics
// written past it are cut back), and a corrupt newest checkpoint (fallback with a warning).
#include <gtest/gtest.h>

#include "train_test_support.h"

namespace anvil {
namespace {

using testing_support::deterministic_metrics;
using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

class TrainResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::filesystem::remove_all(root); }

  // Trains in `dir` with the shared tiny settings plus `extra`; expects success.
  void train(const std::filesystem::path& dir, const std::string& extra) {
    const auto result =
        run_anvil("train --run-dir " + dir.string() + " " + tiny_synthetic_args() + " " + extra);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    last_output = result.output;
  }

  std::filesystem::path root;
  std::string last_output;
};

TEST_F(TrainResumeTest, TwentyStepsThenResumeToFortyMatchesFortyStraight) {
  // A constant schedule makes the learning rate independent of training.steps, so the first
  // leg can end at 20 and the second extend the same run to 40.
  const std::string common = "--optimizer.schedule=constant --checkpoint.every=0";
  train(root / "straight", common + " --training.steps=40");
  train(root / "resumed", common + " --training.steps=20");
  train(root / "resumed", common + " --training.steps=40");
  EXPECT_NE(last_output.find("resumed from"), std::string::npos) << last_output;
  const auto straight = deterministic_metrics(root / "straight");
  ASSERT_EQ(straight.size(), 44u);  // 40 train records and 4 evaluations
  EXPECT_EQ(deterministic_metrics(root / "resumed"), straight);
}

TEST_F(TrainResumeTest, CrashAfterCheckpointResumesExactlyWithCosineSchedule) {
  const std::string common = "--training.steps=40 --checkpoint.every=20 --checkpoint.keep=5";
  train(root / "straight", common);
  train(root / "crashed", common);
  // Simulate a crash just before the final checkpoint: its records are in metrics.jsonl, but
  // the newest checkpoint is step 20.
  std::filesystem::remove_all(root / "crashed" / "checkpoints" / "step-0000040");
  train(root / "crashed", common);
  EXPECT_NE(last_output.find("resumed from"), std::string::npos);
  EXPECT_NE(last_output.find("step-0000020"), std::string::npos);
  const auto straight = deterministic_metrics(root / "straight");
  ASSERT_EQ(straight.size(), 44u);
  EXPECT_EQ(deterministic_metrics(root / "crashed"), straight);
}

TEST_F(TrainResumeTest, CorruptNewestCheckpointFallsBackWithAWarning) {
  const std::string common = "--training.steps=40 --checkpoint.every=20 --checkpoint.keep=5";
  train(root / "straight", common);
  train(root / "corrupt", common);
  const auto model = root / "corrupt" / "checkpoints" / "step-0000040" / "model.safetensors";
  {
    std::fstream file(model, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-5, std::ios::end);
    file.put('\x7f');
  }
  train(root / "corrupt", common);
  EXPECT_NE(last_output.find("warning"), std::string::npos) << last_output;
  EXPECT_NE(last_output.find("step-0000040"), std::string::npos) << last_output;
  EXPECT_NE(last_output.find("resumed from"), std::string::npos) << last_output;
  EXPECT_EQ(deterministic_metrics(root / "corrupt"), deterministic_metrics(root / "straight"));
}

TEST_F(TrainResumeTest, CompletedRunResumesToNothing) {
  train(root / "done", "--training.steps=5");
  const auto before = deterministic_metrics(root / "done");
  train(root / "done", "--training.steps=5");
  EXPECT_NE(last_output.find("nothing to do"), std::string::npos) << last_output;
  EXPECT_EQ(deterministic_metrics(root / "done"), before);
}

}  // namespace
}  // namespace anvil
