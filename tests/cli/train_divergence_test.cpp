// Divergence, end to end: a non-finite loss or gradient norm stops `anvil train` with exit
// status kExitDiverged and one error line naming the step, and no checkpoint of that step (or
// any checkpoint with a non-finite value) is written; with training.skip_nonfinite the step is
// skipped (counted in metrics.jsonl and the summary), the run stops after
// training.max_skipped_steps in a row, and a run with a transient bad step resumes exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/divergence_error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::deterministic_metrics;
using testing_support::run_anvil;
using testing_support::run_shell;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

class TrainDivergenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(root); }

  // Expects every committed checkpoint of `run` to verify and hold only finite values;
  // returns their steps.
  static std::vector<int64_t> expect_finite_checkpoints(const fs::path& run) {
    const CheckpointManager manager(run / "checkpoints", 1);
    const std::vector<int64_t> steps = manager.committed_steps();
    for (const int64_t step : steps) {
      const LoadedCheckpoint checkpoint = CheckpointManager::load(manager.committed_dir(step));
      for (const CheckpointFileRecord& record : checkpoint.files) {
        if (!record.path.ends_with(".safetensors")) continue;
        const SafetensorsFile file = SafetensorsFile::open(checkpoint.dir / record.path);
        for (const SafetensorsEntry& entry : file.entries()) {
          std::vector<float> values(static_cast<size_t>(entry.numel()));
          entry.read_f32(values);
          const auto bad = std::find_if(values.begin(), values.end(),
                                        [](float v) { return !std::isfinite(v); });
          EXPECT_EQ(bad, values.end()) << record.path << " " << entry.name << " of step " << step;
        }
      }
    }
    return steps;
  }

  // Expects every line of the run's metrics.jsonl to be JSON; returns the train records.
  static std::vector<nlohmann::json> train_records(const fs::path& run) {
    std::vector<nlohmann::json> records;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_FALSE(record.is_discarded()) << line;
      if (!record.is_discarded() && record["type"] == "train") records.push_back(record);
    }
    return records;
  }

  static int occurrences(const std::string& text, const std::string& needle) {
    int count = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
      ++count;
    return count;
  }

  fs::path root;
};

// At lr 1e30 the first update leaves weights near 1e29 (finite), so step 2 overflows.
const std::string kExplodingLr = " --optimizer.lr=1e30 --optimizer.min_lr=0 --checkpoint.every=1";

TEST_F(TrainDivergenceTest, ANonFiniteStepStopsTheRunNamingTheStepAndIsNeverCheckpointed) {
  const fs::path run = root / "run";
  const auto result = run_anvil("train --run-dir " + run.string() + " " + tiny_synthetic_args() +
                                " --training.steps=6" + kExplodingLr);
  EXPECT_EQ(result.exit_code, kExitDiverged) << result.output;
  EXPECT_EQ(occurrences(result.output, "anvil: error:"), 1) << result.output;
  const auto error = result.output.find("anvil: error: [train] training diverged at step 2: ");
  ASSERT_NE(error, std::string::npos) << result.output;
  EXPECT_EQ(result.output.find('\n', error), result.output.size() - 1) << "not the last line";
  EXPECT_NE(result.output.find("resume from " + (run / "checkpoints" / "step-0000001").string()),
            std::string::npos)
      << result.output;
  EXPECT_EQ(expect_finite_checkpoints(run), std::vector<int64_t>{1});
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step-0000002.partial"));
  const auto records = train_records(run);
  ASSERT_EQ(records.size(), 1u);  // the diverged step wrote no record
  EXPECT_EQ(records[0]["step"], 1);
}

TEST_F(TrainDivergenceTest, SkippedStepsAreCountedUntilTooManyInARow) {
  const fs::path run = root / "run";
  const auto result =
      run_anvil("train --run-dir " + run.string() + " " + tiny_synthetic_args() +
                " --training.steps=8 --training.skip_nonfinite=true "
                "--training.max_skipped_steps=3 --checkpoint.keep=5" +
                kExplodingLr);
  EXPECT_EQ(result.exit_code, kExitDiverged) << result.output;
  // The weights near 1e29 overflow the backward pass (the loss itself may stay finite).
  const auto warning = result.output.find("warning: [train] step 2: loss ");
  ASSERT_NE(warning, std::string::npos) << result.output;
  EXPECT_NE(result.output.find("gradient norm nan is not finite; step skipped", warning),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("anvil: error: [train] training diverged: steps 2-4 all had a "
                               "non-finite loss or gradient norm (3 in a row, "
                               "training.max_skipped_steps = 3)"),
            std::string::npos)
      << result.output;
  // Skipped steps leave the weights as they were: their checkpoints are still finite.
  EXPECT_EQ(expect_finite_checkpoints(run), (std::vector<int64_t>{1, 2, 3}));
  const auto records = train_records(run);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(records[0]["loss"].is_number());
  EXPECT_EQ(records[0]["skipped_steps"], 0);
  EXPECT_TRUE(records[1]["grad_norm"].is_null());
  EXPECT_EQ(records[1]["skipped_steps"], 1);
  EXPECT_EQ(records[2]["skipped_steps"], 2);
}

// One poisoned batch (ANVIL_TEST_NAN_AT_STEP) is skipped and training goes on; the skip is part
// of the checkpointed state, so stopping after it and resuming repeats the straight run.
TEST_F(TrainDivergenceTest, ATransientNonFiniteStepIsSkippedAndTheRunResumesExactly) {
  const std::string settings = tiny_synthetic_args() +
                               " --training.skip_nonfinite=true --optimizer.schedule=constant "
                               "--checkpoint.every=2 --training.eval_every=2 --logging.json=true";
  const std::string poison = "ANVIL_TEST_NAN_AT_STEP=3 " + std::string(ANVIL_BINARY);
  const auto straight = run_shell(poison + " train --run-dir " + (root / "straight").string() +
                                  " " + settings + " --training.steps=6");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  EXPECT_NE(straight.output.find("warning: [train] step 3: loss nan"), std::string::npos)
      << straight.output;
  const std::string summary_text = straight.output.substr(straight.output.rfind("{\"steps\""));
  const auto summary = nlohmann::json::parse(summary_text);
  EXPECT_EQ(summary["steps"], 6);
  EXPECT_EQ(summary["skipped_steps"], 1);
  const auto records = train_records(root / "straight");
  ASSERT_EQ(records.size(), 6u);
  EXPECT_TRUE(records[2]["loss"].is_null());
  EXPECT_TRUE(records[3]["loss"].is_number());
  EXPECT_EQ(records[5]["skipped_steps"], 1);
  const auto state = nlohmann::json::parse(
      std::ifstream(root / "straight" / "checkpoints" / "step-0000004" / "train_state.json"));
  EXPECT_EQ(state["optimizer_step"], 3);
  EXPECT_EQ(state["skipped_steps"], 1);

  const auto first = run_shell(poison + " train --run-dir " + (root / "legs").string() + " " +
                               settings + " --training.steps=4");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto second = run_anvil("train --run-dir " + (root / "legs").string() + " " + settings +
                                " --training.steps=6");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  EXPECT_EQ(deterministic_metrics(root / "legs"), deterministic_metrics(root / "straight"));
}

}  // namespace
}  // namespace anvil
