// Corrupted checkpoints, end to end through the built binary: `--resume auto` names the file
// that fails and falls back to the newest checkpoint that verifies, ending equal to a run
// that was never corrupted; `anvil checkpoint verify` reports ok runs, flipped bytes, missing
// and truncated files, leftovers and a missing path. Two ranks fall back together.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::deterministic_metrics;
using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

const std::string kCommon =
    "--training.steps=30 --checkpoint.every=10 --checkpoint.keep=5 --resume auto";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Flips one bit of one byte in place (same size), as silent disk corruption would.
void flip_byte(const fs::path& path, std::streamoff offset_from_end) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-offset_from_end, std::ios::end);
  const char byte = static_cast<char>(file.get());
  file.seekp(-offset_from_end, std::ios::end);
  file.put(static_cast<char>(byte ^ 0x10));
}

class CheckpointVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(root); }

  // Trains in `dir` with the shared tiny settings; expects success and returns the output.
  std::string train(const fs::path& dir) {
    const auto result =
        run_anvil("train --run-dir " + dir.string() + " " + tiny_synthetic_args() + " " + kCommon);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return result.output;
  }

  fs::path root;
};

TEST_F(CheckpointVerifyTest, FlippedByteInNewestWeightsFallsBackAndEndsEqual) {
  train(root / "straight");
  train(root / "corrupt");
  const fs::path newest = root / "corrupt" / "checkpoints" / "step-0000030";
  const fs::path model = newest / "model.safetensors";
  flip_byte(model, 7);

  const auto verify = run_anvil("checkpoint verify " + (root / "corrupt").string());
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find(newest.string() + ": FAILED: model.safetensors checksum mismatch"),
            std::string::npos)
      << verify.output;

  const std::string output = train(root / "corrupt");
  EXPECT_NE(output.find("skipping " + newest.string() +
                        ": it fails verification (model.safetensors checksum mismatch)"),
            std::string::npos)
      << output;
  const fs::path previous = root / "corrupt" / "checkpoints" / "step-0000020";
  EXPECT_NE(output.find("falling back to " + previous.string()), std::string::npos) << output;
  EXPECT_NE(output.find("resumed from"), std::string::npos) << output;

  const auto straight = deterministic_metrics(root / "straight");
  ASSERT_FALSE(straight.empty());
  EXPECT_EQ(deterministic_metrics(root / "corrupt"), straight);
  // The recomputed step-30 checkpoint replaced the corrupt one and equals the straight run's.
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string expected =
        read_bytes(root / "straight" / "checkpoints" / "step-0000030" / file);
    ASSERT_FALSE(expected.empty()) << file;
    EXPECT_EQ(read_bytes(newest / file), expected) << file;
  }
  EXPECT_EQ(run_anvil("checkpoint verify " + (root / "corrupt").string()).exit_code, 0);
}

// Two ranks with sharded optimizer state: rank 0 verifies and broadcasts its choice, so the
// fallback is reported once and both ranks resume from the same checkpoint.
TEST_F(CheckpointVerifyTest, TwoRanksFallBackTogether) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  auto launch = [&](const fs::path& dir) {
    const auto result = run_anvil("launch --nproc 2 -- train " + tiny_synthetic_args() + " " +
                                  kCommon + " --parallel.zero_stage=2 --run-dir " + dir.string());
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return result.output;
  };
  launch(root / "straight");
  launch(root / "corrupt");
  const fs::path newest = root / "corrupt" / "checkpoints" / "step-0000030";
  flip_byte(newest / "model.safetensors", 11);
  const std::string output = launch(root / "corrupt");
  EXPECT_EQ(testing_support::occurrences(output, "skipping " + newest.string() +
                                                     ": it fails verification (model.safetensors "
                                                     "checksum mismatch)"),
            1)
      << output;
  EXPECT_EQ(testing_support::occurrences(output, "falling back to " +
                                                     (root / "corrupt" / "checkpoints" /
                                                      "step-0000020").string()),
            1)
      << output;
  const auto straight = deterministic_metrics(root / "straight");
  ASSERT_FALSE(straight.empty());
  EXPECT_EQ(deterministic_metrics(root / "corrupt"), straight);
}

TEST_F(CheckpointVerifyTest, VerifyReportsEachProblemNamingTheFile) {
  train(root / "run");
  const fs::path checkpoints = root / "run" / "checkpoints";
  auto ok = run_anvil("checkpoint verify " + (root / "run").string());
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find((checkpoints / "step-0000010").string() + ": ok"), std::string::npos)
      << ok.output;
  EXPECT_NE(ok.output.find("3 committed checkpoint(s)"), std::string::npos) << ok.output;
  ok = run_anvil("checkpoint verify " + (checkpoints / "step-0000020").string());
  EXPECT_EQ(ok.exit_code, 0) << ok.output;

  // Leftovers are listed but are not errors.
  fs::create_directories(checkpoints / "step-0000040.partial");
  fs::create_directories(checkpoints / "step-0000050");
  ok = run_anvil("checkpoint verify " + (root / "run").string());
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("step-0000040.partial: staging leftover"), std::string::npos)
      << ok.output;
  EXPECT_NE(ok.output.find("step-0000050: not committed, no COMMIT marker"), std::string::npos)
      << ok.output;

  fs::remove(checkpoints / "step-0000010" / "train_state.json");
  const fs::path truncated = checkpoints / "step-0000020" / "optimizer.safetensors";
  const auto size = fs::file_size(truncated);
  fs::resize_file(truncated, size - 100);
  flip_byte(checkpoints / "step-0000030" / "model.safetensors", 3);

  const auto bad = run_anvil("checkpoint verify " + (root / "run").string());
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("step-0000010: FAILED: train_state.json is missing"),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("step-0000020: FAILED: optimizer.safetensors has " +
                            std::to_string(size - 100) + " bytes, the manifest says " +
                            std::to_string(size)),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("step-0000030: FAILED: model.safetensors checksum mismatch"),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("3 failed"), std::string::npos) << bad.output;
  for (const char* step : {"step-0000010", "step-0000020", "step-0000030"})
    EXPECT_EQ(run_anvil("checkpoint verify " + (checkpoints / step).string()).exit_code, 1);

  const auto missing = run_anvil("checkpoint verify " + (root / "nowhere").string());
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find((root / "nowhere").string() +
                                ": no such run directory or checkpoint folder"),
            std::string::npos)
      << missing.output;
  const auto help = run_anvil("checkpoint verify --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("Exits 1 when any committed checkpoint fails"), std::string::npos)
      << help.output;
}

}  // namespace
}  // namespace anvil
