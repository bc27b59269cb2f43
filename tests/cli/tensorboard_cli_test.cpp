// TensorBoard event files end to end through the built binary: a run that crashes after a
// checkpoint and resumes holds one event file whose events equal its metrics.jsonl record for
// record, read here with libprotobuf and, where a Python with the tensorboard package is found
// (ANVIL_TEST_PYTHON, else python3), with TensorBoard's own readers
// (tests/cli/check_tensorboard.py).
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/file_util.h"
#include "io/tensorboard_events.h"
#include "observe/metrics.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::run_anvil;
using testing_support::run_shell;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

class TensorBoardCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(root); }

  // Trains 40 steps in `run` (evaluations every 10, MFU against a 1 TFLOP/s peak), deletes
  // the step-40 checkpoint as a crash before it would have, and trains again: the second leg
  // resumes from step 20 and writes steps 21-40 a second time.
  void train_with_a_resume(const fs::path& run) {
    const std::string args = "train --run-dir " + run.string() + " " + tiny_synthetic_args() +
                             " --training.steps=40 --checkpoint.every=20 --checkpoint.keep=5 "
                             "--logging.peak_tflops=1";
    const auto first = run_anvil(args);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    fs::remove_all(run / "checkpoints" / "step-0000040");
    const auto second = run_anvil(args);
    ASSERT_EQ(second.exit_code, 0) << second.output;
    ASSERT_NE(second.output.find("step-0000020"), std::string::npos) << second.output;
  }

  fs::path root;
};

TEST_F(TensorBoardCliTest, EventFileEqualsMetricsRecordForRecordAcrossAResume) {
  const fs::path run = root / "run";
  ASSERT_NO_FATAL_FAILURE(train_with_a_resume(run));
  const std::vector<fs::path> files = event_files(run);
  ASSERT_EQ(files.size(), 1u);
  const std::vector<TensorBoardEvent> events = read_event_file(files[0]);
  std::istringstream lines(read_file(run / "metrics.jsonl"));
  std::vector<nlohmann::ordered_json> records;
  for (std::string line; std::getline(lines, line);) {
    records.push_back(nlohmann::ordered_json::parse(line));
  }
  ASSERT_EQ(records.size(), 44u);  // 40 steps and 4 evaluations, each once
  ASSERT_EQ(events.size(), records.size() + 1);
  EXPECT_EQ(events[0].file_version, kTensorBoardFileVersion);
  for (size_t r = 0; r < records.size(); ++r) {
    const TensorBoardEvent& event = events[r + 1];
    const std::vector<MetricScalar> expected = metric_scalars(records[r]);
    EXPECT_EQ(event.step, records[r]["step"].get<int64_t>());
    ASSERT_EQ(event.scalars.size(), expected.size()) << records[r].dump();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(event.scalars[i].tag, expected[i].tag);
      EXPECT_EQ(event.scalars[i].value, static_cast<float>(expected[i].value)) << expected[i].tag;
    }
  }
  // The train records carry the MFU, and the events with them.
  EXPECT_TRUE(records[0].contains("mfu")) << records[0].dump();
  EXPECT_EQ(events[1].scalars.back().tag, "train/elapsed_s");
}

TEST_F(TensorBoardCliTest, TensorBoardsReadersSeeExactlyTheMetrics) {
  const char* configured = std::getenv("ANVIL_TEST_PYTHON");
  const std::string python = configured != nullptr ? configured : "python3";
  if (run_shell(python + " -c 'import tensorboard, numpy'").exit_code != 0) {
    GTEST_SKIP() << python << " cannot import tensorboard and numpy (not Debian packages); "
                 << "set ANVIL_TEST_PYTHON to a Python that can (a venv with `pip install "
                 << "tensorboard`); TensorBoardEvents.* and the test above check the format";
  }
  const fs::path run = root / "run";
  ASSERT_NO_FATAL_FAILURE(train_with_a_resume(run));
  const auto check = run_shell(python + " " + ANVIL_TEST_DATA + "/cli/check_tensorboard.py " +
                               run.string());
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("ok: "), std::string::npos) << check.output;
}

}  // namespace
}  // namespace anvil
