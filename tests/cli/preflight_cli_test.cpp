// The pre-flight memory check through the built binary, under a memory limit the test sets on
// its own child (setrlimit(RLIMIT_AS), which the check reads beside MemAvailable and the
// cgroup; never the machine's): a run sized past the limit is refused in under 5 s with a peak
// RSS under 500 MB (the child's rusage), naming the numbers and a setting that fits; that
// setting then trains its steps under the same limit (its checkpoint: see the test). --preflight=warn goes on, off skips the check, and
// a finished run's metrics carry the planned peak beside the measured one.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::run_anvil;
using testing_support::scratch_dir;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct LimitedRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  double seconds = 0;
  double peak_rss_mb = 0;  // the child's own (ru_maxrss)
};

// Runs `anvil <args>` in a child whose address space is limited to `limit` bytes.
LimitedRun run_limited(const std::vector<std::string>& args, rlim_t limit) {
  int pipe_fds[2];
  EXPECT_EQ(pipe(pipe_fds), 0);
  const auto begin = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    // RLIMIT_AS counts address space, and glibc reserves 64 MiB of it for each thread's own
    // malloc arena (checkpoint writing starts threads): one arena keeps the address space
    // close to the memory the limit is meant to stand for.
    setenv("MALLOC_ARENA_MAX", "1", 1);
    const rlimit address_space{limit, limit};
    if (setrlimit(RLIMIT_AS, &address_space) != 0) _exit(126);
    std::vector<char*> argv{const_cast<char*>(ANVIL_BINARY)};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(ANVIL_BINARY, argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  LimitedRun run;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;)
    run.output.append(buffer, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;
  return run;
}

// The tiny preset on synthetic tokens with activations that grow with the micro-batch.
std::vector<std::string> run_args(const fs::path& run_dir, const std::string& batch) {
  return {"train", "--threads", "1", "--data.synthetic=true", "--training.steps=2",
          "--training.eval_steps=0", "--logging.every=1", "--training.batch_size=" + batch,
          "--run-dir", run_dir.string()};
}

// Returns the size before `what` in a refusal ("1.5 GiB <what>" or "900.0 MiB <what>") in bytes.
double gib_before(const std::string& text, const std::string& what) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(text, match, std::regex("([0-9.]+) (GiB|MiB) " + what))) << text;
  if (match.empty()) return 0;
  return std::stod(match[1]) * (match[2] == "GiB" ? kGiB : kGiB / 1024);
}

TEST(PreflightCli, ARunPastTheLimitIsRefusedFastAndItsSuggestionRuns) {
  const fs::path dir = scratch_dir("preflight_limit");
  // Under RLIMIT_AS a process's unplanned address space is fixed, not a share of the run: thread
  // stacks, libraries' lazy buffers, kernel scratch, 36 to 45 MiB beyond the plan at every
  // micro-batch of this preset (VmPeak less the address space at the check, measured at 4, 16,
  // 32 and 59). 5% of this test's 0.75 GiB is less than that, so the test states a margin that
  // covers it, as a user with so small a budget would (docs/plan.md, section on pre-flight).
  const std::string margin = "--preflight.margin=0.15";
  auto args = [&](const fs::path& run_dir, const std::string& batch) {
    std::vector<std::string> out = run_args(run_dir, batch);
    out.push_back(margin);
    return out;
  };
  // What the limit leaves free depends on the address space the binary maps before the check
  // (libraries, thread stacks): a first refusal under a known limit says how much it saw free.
  const rlim_t probe_limit = rlim_t{4} << 30;
  const LimitedRun probe = run_limited(args(dir / "probe", "100000"), probe_limit);
  ASSERT_EQ(probe.exit_code, 1) << probe.output;
  const double mapped = static_cast<double>(probe_limit) -
                        gib_before(probe.output, "free in host memory \\(RLIMIT_AS\\)");
  // 768 MiB past what is mapped: the preset at micro-batch 64 needs 940 MiB.
  const auto limit = static_cast<rlim_t>(mapped + 0.75 * kGiB);

  const LimitedRun refused = run_limited(args(dir / "big", "64"), limit);
  ASSERT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_LT(refused.seconds, 5.0) << refused.output;
  EXPECT_LT(refused.peak_rss_mb, 500.0) << refused.output;
  // One line: the peak, what is free and why, the largest category, and what fits.
  EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1) << refused.output;
  EXPECT_TRUE(refused.output.starts_with("anvil: error: [preflight] the run needs "))
      << refused.output;
  const double needed = gib_before(refused.output, "per device at its peak");
  const double free_bytes = gib_before(refused.output, "free in host memory \\(RLIMIT_AS\\)");
  EXPECT_GT(needed, free_bytes) << refused.output;
  // The free figure is the limit less what this process had mapped at its check. Two processes
  // need not map the same before it (CI saw this one map 152 MiB less than the probe; OpenBLAS's
  // pool is now settled before the check, other libraries' threads start when they will), so
  // the bounds are loose: under the limit, and most of the 0.75 GiB the probe left.
  EXPECT_LT(free_bytes, static_cast<double>(limit)) << refused.output;
  EXPECT_GT(free_bytes, 0.5 * kGiB) << refused.output;
  EXPECT_NE(refused.output.find("the largest)"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("with the 15% margin"), std::string::npos) << refused.output;
  EXPECT_FALSE(fs::exists(dir / "big" / "metrics.jsonl")) << refused.output;

  std::smatch match;
  ASSERT_TRUE(std::regex_search(refused.output, match,
                                std::regex("fits with --training\\.batch_size=([0-9]+) \\(")))
      << refused.output;
  const std::string batch = match[1];
  EXPECT_LT(std::stoi(batch), 64);
  // The offered micro-batch trains under the same limit, final checkpoint included.
  const LimitedRun fitted = run_limited(args(dir / "fitted", batch), limit);
  EXPECT_EQ(fitted.exit_code, 0) << fitted.output;
  EXPECT_NE(fitted.output.find("step 2/2 | loss "), std::string::npos) << fitted.output;
  fs::remove_all(dir);
}

TEST(PreflightCli, WarnGoesOnAndOffSkipsTheCheck) {
  const fs::path dir = scratch_dir("preflight_modes");
  // Far past what the limit leaves: warned about, then the allocation itself fails.
  const rlim_t limit = rlim_t{3} << 30;
  std::vector<std::string> warn = run_args(dir / "warn", "100000");
  warn.push_back("--preflight=warn");
  const LimitedRun warned = run_limited(warn, limit);
  EXPECT_NE(warned.output.find("[preflight] the run needs "), std::string::npos) << warned.output;
  EXPECT_NE(warned.output.find("(preflight.mode = warn: going on)"), std::string::npos)
      << warned.output;

  std::vector<std::string> bad = run_args(dir / "bad", "2");
  bad.push_back("--preflight=maybe");
  const LimitedRun refused_flag = run_limited(bad, limit);
  EXPECT_EQ(refused_flag.exit_code, 1) << refused_flag.output;
  EXPECT_NE(refused_flag.output.find("--preflight"), std::string::npos) << refused_flag.output;
  fs::remove_all(dir);
}

// The planned peak per device sits beside the measured one in the first and the last record.
TEST(PreflightCli, MetricsCarryThePlannedPeakBesideTheMeasuredOne) {
  const fs::path dir = scratch_dir("preflight_metrics");
  // The tiny preset: the kernel scratch the plan leaves out (0.27 MiB, docs/plan.md) is small
  // beside its 100 MB.
  const auto result = run_anvil(
      "train --threads 1 --data.synthetic=true --training.steps=3 --training.batch_size=2 "
      "--training.seq_len=64 --training.eval_steps=0 --run-dir " + (dir / "run").string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream in(dir / "run" / "metrics.jsonl");
  std::vector<nlohmann::json> train;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["type"] == "train") train.push_back(record);
  }
  ASSERT_EQ(train.size(), 3u);
  for (const nlohmann::json* record : {&train.front(), &train.back()}) {
    ASSERT_TRUE(record->contains("mem_planned_bytes")) << record->dump();
    const auto planned = (*record)["mem_planned_bytes"].get<double>();
    const auto measured = (*record)["mem_peak_bytes"].get<double>();
    EXPECT_GT(planned, 0);
    // The plan predicts what the backend counts but for the unmodelled scratch.
    EXPECT_NEAR(planned / measured, 1.0, 0.02) << record->dump();
  }

  const auto off = run_anvil("train " + testing_support::tiny_synthetic_args() +
                             " --training.steps=1 --preflight=off --run-dir " +
                             (dir / "off").string());
  ASSERT_EQ(off.exit_code, 0) << off.output;
  std::ifstream off_in(dir / "off" / "metrics.jsonl");
  std::string first;
  std::getline(off_in, first);
  EXPECT_EQ(first.find("mem_planned_bytes"), std::string::npos) << first;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anvil
