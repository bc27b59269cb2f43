// One run per run directory, end to end: `anvil train` on a directory another process holds
// refuses at once (exit 1, one error line naming the directory and the owner) without writing
// into it; a lock file left by a dead process is taken over with a warning and the run trains.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "train/run_dir.h"
#include "train_test_support.h"

namespace anvil {
namespace {

using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

TEST(TrainLockTest, ASecondRunOnAHeldRunDirectoryIsRefusedAtOnce) {
  const auto root = scratch_dir("lock_held");
  const auto run = root / "run";
  {
    // The same lock `anvil train` takes, held by this process: to the binary it is a live run.
    RunDirLock owner(run);
    const auto begin = std::chrono::steady_clock::now();
    const auto refused = run_anvil("train --run-dir " + run.string() + " " +
                                   tiny_synthetic_args() + " --training.steps=50");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    EXPECT_EQ(refused.exit_code, 1) << refused.output;
    EXPECT_EQ(refused.output.rfind("anvil: error: [run] run directory " + run.string() +
                                       " is in use by pid " + std::to_string(getpid()) +
                                       " on host ",
                                   0),
              0u)
        << refused.output;
    EXPECT_EQ(refused.output.find('\n'), refused.output.size() - 1) << refused.output;
    EXPECT_LT(seconds, 20.0) << "the refusal should not wait for anything";
    EXPECT_FALSE(std::filesystem::exists(run / "config.toml"));
    EXPECT_FALSE(std::filesystem::exists(run / "metrics.jsonl"));
    EXPECT_FALSE(std::filesystem::exists(run / "checkpoints"));
  }
  // Released: the same command now trains.
  const auto trained = run_anvil("train --run-dir " + run.string() + " " +
                                 tiny_synthetic_args() + " --training.steps=2");
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_FALSE(std::filesystem::exists(RunDirLock::lock_path(run)));
  std::filesystem::remove_all(root);
}

TEST(TrainLockTest, AStaleLockFromADeadProcessIsTakenOverWithAWarning) {
  const auto root = scratch_dir("lock_stale");
  const auto run = root / "run";
  std::filesystem::create_directories(run);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // reaped: no process has this pid now
  {
    std::ofstream record(RunDirLock::lock_path(run));
    record << "{\"pid\":" << child << ",\"host\":\"crashed-node\",\"started\":\"2001-01-01\"}\n";
  }
  const auto result = run_anvil("train --run-dir " + run.string() + " " + tiny_synthetic_args() +
                                " --training.steps=2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("warning: [run] taking over run directory " + run.string() +
                               ": its lock was left by pid " + std::to_string(child) +
                               " on host crashed-node"),
            std::string::npos)
      << result.output;
  EXPECT_TRUE(std::filesystem::exists(run / "checkpoints" / "step-0000002" / "COMMIT"));
  EXPECT_FALSE(std::filesystem::exists(RunDirLock::lock_path(run)));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace anvil
