// SIGTERM during training: the run finishes the step in flight, writes a checkpoint, exits 0
// and prints the exact command that resumes it; running that command completes the run with
// metrics identical (wall-clock fields aside) to a run that was never interrupted.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <sstream>

#include "train_test_support.h"

namespace anvil {
namespace {

using testing_support::deterministic_metrics;
using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

struct SpawnedRun {
  int exit_code = -1;
  std::string output;
  int64_t signalled_after_step = -1;
};

// Runs `anvil train <args>` with stdout and stderr on a pipe, sends SIGTERM once the progress
// line of step `signal_at_step` has been read, and collects the rest of the output.
SpawnedRun train_and_terminate(const std::vector<std::string>& args, int64_t signal_at_step) {
  int fds[2];
  SpawnedRun run;
  if (pipe(fds) != 0) return run;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    std::string binary = ANVIL_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string pending;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) {
    run.output.append(buffer, static_cast<size_t>(n));
    pending.append(buffer, static_cast<size_t>(n));
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      long long step = 0;
      if (run.signalled_after_step < 0 && std::sscanf(line.c_str(), "step %lld/", &step) == 1 &&
          step >= signal_at_step) {
        kill(pid, SIGTERM);
        run.signalled_after_step = step;
      }
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

TEST(TrainSignalTest, SigtermCheckpointsAndTheResumeCommandContinuesExactly) {
  const auto root = scratch_dir("signal");
  // Enough steps that the run is still going when the signal arrives; a plain progress line
  // per step lets the test signal at a known point.
  const std::string settings = tiny_synthetic_args() + " --training.steps=1000 --logging.every=1";
  const auto straight =
      run_anvil("train --run-dir " + (root / "straight").string() + " " + settings);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  std::vector<std::string> args = {"train", "--run-dir", (root / "stopped").string()};
  for (const auto& word : split_words(settings)) args.push_back(word);
  const SpawnedRun stopped = train_and_terminate(args, 3);
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  ASSERT_GE(stopped.signalled_after_step, 3) << stopped.output;
  const auto marker = stopped.output.find("resume with: ");
  ASSERT_NE(marker, std::string::npos) << "the run finished before the signal arrived:\n"
                                       << stopped.output;
  std::string command = stopped.output.substr(marker + 13);
  command = command.substr(0, command.find('\n'));
  ASSERT_EQ(command.rfind("anvil train ", 0), 0u) << command;
  EXPECT_NE(command.find("--run-dir " + (root / "stopped").string()), std::string::npos);

  const auto resumed = run_anvil(command.substr(6));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  const auto expected = deterministic_metrics(root / "straight");
  ASSERT_EQ(testing_support::count_containing(expected, "\"type\":\"train\""), 1000);
  EXPECT_EQ(deterministic_metrics(root / "stopped"), expected);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace anvil
