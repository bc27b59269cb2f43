// A checkpoint that cannot be written, end to end, with real OS write failures: RLIMIT_FSIZE
// (`ulimit -f` with SIGXFSZ ignored: write(2) fails with EFBIG) for every file above the
// limit, which the small metrics.jsonl and config.toml stay under while the model does not;
// and, where this machine lets the test mount one, a small tmpfs that fills up (ENOSPC).
// Either way: one error line naming the file and the reason, exit 1 (or, with
// checkpoint.on_error = "continue", warnings and a finished run), no *.partial folder left,
// valid metrics.jsonl, and the previous checkpoint still verifies and resumes.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::occurrences;
using testing_support::run_anvil;
using testing_support::run_shell;
using testing_support::scratch_dir;

// About 0.5M parameters: model.safetensors ~2 MB, optimizer.safetensors ~4 MB.
const std::string kSettings =
    "--threads 1 --data.synthetic=true --model.dim=64 --model.n_layers=2 --model.n_heads=4 "
    "--model.n_kv_heads=2 --model.ffn_dim=128 --model.vocab_size=6000 --model.max_seq_len=16 "
    "--training.batch_size=1 --training.grad_accum=1 --training.seq_len=16 "
    "--training.eval_steps=0 --optimizer.schedule=constant --optimizer.warmup_steps=0 "
    "--checkpoint.every=2 --logging.every=1000 --logging.json=true";

class TrainDiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(root); }

  // Runs `anvil train` in `run` with every file limited to `kib` KiB. POSIX (and dash) count
  // `ulimit -f` in 512-byte blocks; a /bin/sh that is bash counts KiB, which only doubles the
  // limit, still far below the model file's size.
  static testing_support::CommandResult train_limited(const fs::path& run, int kib,
                                                      const std::string& extra) {
    return run_shell("sh -c 'trap \"\" XFSZ; ulimit -f " + std::to_string(2 * kib) + "; exec " +
                     std::string(ANVIL_BINARY) + " train --run-dir " + run.string() + " " +
                     kSettings + " " + extra + "'");
  }

  // Expects the state a failed save must leave: no staging folder, `newest` still the
  // newest committed checkpoint and valid, every metrics line JSON.
  static void expect_intact(const fs::path& run, int64_t newest) {
    for (const auto& entry : fs::directory_iterator(run / "checkpoints")) {
      EXPECT_FALSE(entry.path().filename().string().ends_with(".partial")) << entry.path();
      EXPECT_FALSE(entry.path().filename().string().ends_with(".tmp")) << entry.path();
    }
    const CheckpointManager manager(run / "checkpoints", 1);
    ASSERT_FALSE(manager.committed_steps().empty());
    EXPECT_EQ(manager.committed_steps().back(), newest);
    const auto latest = manager.find_latest_valid();
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(latest->step, newest);
    std::ifstream in(run / "metrics.jsonl");
    int lines = 0;
    for (std::string line; std::getline(in, line); ++lines) {
      EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
    }
    EXPECT_GT(lines, 0);
    EXPECT_TRUE(fs::exists(run / "config.toml"));
  }

  fs::path root;
};

TEST_F(TrainDiskFullTest, AFailedSaveStopsWithOneErrorAndKeepsThePreviousCheckpoint) {
  const fs::path run = root / "run";
  const auto first = run_anvil("train --run-dir " + run.string() + " " + kSettings +
                               " --training.steps=2");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_GT(fs::file_size(run / "checkpoints" / "step-0000002" / "model.safetensors"), 1u << 20);

  const auto full = train_limited(run, 512, "--training.steps=4");
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_EQ(occurrences(full.output, "anvil: error:"), 1) << full.output;
  const std::string expected =
      "anvil: error: [checkpoint] cannot save step 4: [io] cannot write " +
      (run / "checkpoints" / "step-0000004.partial" / "model.safetensors").string() +
      ".tmp: File too large; its partial files were removed and step-0000002 is still the "
      "newest checkpoint\n";
  EXPECT_TRUE(full.output.ends_with(expected)) << full.output;
  expect_intact(run, 2);
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step-0000004"));

  // With room again the same command resumes from the kept checkpoint and finishes.
  const auto resumed = run_anvil("train --run-dir " + run.string() + " " + kSettings +
                                 " --training.steps=4");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + (run / "checkpoints" / "step-0000002").string()),
            std::string::npos)
      << resumed.output;
  expect_intact(run, 4);
}

TEST_F(TrainDiskFullTest, WithOnErrorContinueTheRunWarnsAndFinishes) {
  const fs::path run = root / "run";
  const auto first = run_anvil("train --run-dir " + run.string() + " " + kSettings +
                               " --training.steps=2");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto full =
      train_limited(run, 512, "--training.steps=6 --checkpoint.on_error=continue");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_EQ(occurrences(full.output, "anvil: error:"), 0) << full.output;
  EXPECT_EQ(occurrences(full.output, "File too large; its partial files were removed and "
                                     "step-0000002 is still the newest checkpoint; training "
                                     "continues"),
            2)
      << full.output;
  EXPECT_NE(full.output.find("the run ends at step 6 without a checkpoint of it"),
            std::string::npos)
      << full.output;
  const auto summary = nlohmann::json::parse(full.output.substr(full.output.rfind("{\"steps\"")));
  EXPECT_EQ(summary["steps"], 6);
  EXPECT_EQ(summary["checkpoint_failures"], 2);
  expect_intact(run, 2);
}

// Unmounts a test mount on every way out of the test.
struct Unmount {
  fs::path mount_point;
  ~Unmount() { ::umount2(mount_point.c_str(), MNT_DETACH); }
};

// A real full file system, when the test may mount one (root with CAP_SYS_ADMIN).
TEST_F(TrainDiskFullTest, AFullFileSystemFailsTheSaveWithNoSpaceLeft) {
  const fs::path mount_point = root / "small";
  fs::create_directories(mount_point);
  // Room for one checkpoint (~6 MB) and the metrics, not for a second one.
  if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=9m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); the RLIMIT_FSIZE tests cover the failed write";
  }
  const Unmount unmount{mount_point};
  const fs::path run = mount_point / "run";
  const auto first = run_anvil("train --run-dir " + run.string() + " " + kSettings +
                               " --training.steps=2");
  const auto full = run_anvil("train --run-dir " + run.string() + " " + kSettings +
                              " --training.steps=4");
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_EQ(occurrences(full.output, "anvil: error:"), 1) << full.output;
  EXPECT_NE(full.output.find("anvil: error: [checkpoint] cannot save step 4: [io] cannot write " +
                             (run / "checkpoints" / "step-0000004.partial").string()),
            std::string::npos)
      << full.output;
  EXPECT_NE(full.output.find("No space left on device"), std::string::npos) << full.output;
  expect_intact(run, 2);
}

}  // namespace
}  // namespace anvil
