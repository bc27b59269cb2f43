// The launch supervisor's pure parts: mpirun's command line, tagged output, and the failure
// reports of Open MPI 4 (lines copied from real runs: a SIGKILLed rank, a rank exiting 3, a
// rank calling MPI_Abort).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "core/divergence_error.h"

#include "parallel/launcher.h"

namespace anvil {
namespace {

bool contains_sequence(const std::vector<std::string>& argv, std::vector<std::string> part) {
  return std::search(argv.begin(), argv.end(), part.begin(), part.end()) != argv.end();
}

TEST(Launcher, MpirunCommand) {
  LaunchOptions options;
  options.nproc = 4;
  options.program = "/opt/anvil";
  options.exported_env = {"ANVIL_NUM_THREADS=1"};
  const std::vector<std::string> args = {"train", "--run-dir", "runs/x"};
  const std::vector<std::string> argv = mpirun_command(options, 2, true, args);
  EXPECT_EQ(argv.front(), "mpirun");
  EXPECT_TRUE(contains_sequence(argv, {"-np", "4"}));
  EXPECT_TRUE(contains_sequence(argv, {"--oversubscribe", "--allow-run-as-root", "--tag-output"}));
  EXPECT_TRUE(contains_sequence(argv, {"-x", "ANVIL_NUM_THREADS=1"}));
  EXPECT_TRUE(contains_sequence(argv, {"-x", "ANVIL_LAUNCH_ATTEMPT=2"}));
  EXPECT_TRUE(contains_sequence(argv, {"/opt/anvil", "train", "--run-dir", "runs/x"}));
  EXPECT_EQ(argv.back(), "runs/x");
  const std::vector<std::string> plain = mpirun_command(options, 0, false, args);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "--allow-run-as-root"), 0);
  options.hostfile = "hosts.txt";
  EXPECT_TRUE(
      contains_sequence(mpirun_command(options, 0, false, args), {"--hostfile", "hosts.txt"}));
}

TEST(Launcher, TaggedLines) {
  const TaggedLine out = parse_tagged_line("[1,3]<stdout>:step 4/20 | loss 4.1");
  EXPECT_EQ(out.rank, 3);
  EXPECT_FALSE(out.is_stderr);
  EXPECT_EQ(out.text, "step 4/20 | loss 4.1");
  const TaggedLine err = parse_tagged_line("[1,0]<stderr>:anvil: error: [x] y");
  EXPECT_EQ(err.rank, 0);
  EXPECT_TRUE(err.is_stderr);
  EXPECT_EQ(err.text, "anvil: error: [x] y");
  const TaggedLine own = parse_tagged_line("mpirun noticed that ...");
  EXPECT_EQ(own.rank, -1);
  EXPECT_EQ(own.text, "mpirun noticed that ...");
}

TEST(Launcher, FailureReports) {
  int pending = -1;
  auto killed = parse_mpirun_failure(
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
      pending);
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->rank, 1);
  EXPECT_EQ(killed->reason, "killed by signal 9 (Killed)");

  EXPECT_FALSE(parse_mpirun_failure("  Process name: [[11620,1],3]", pending));
  EXPECT_EQ(pending, 3);
  auto exited = parse_mpirun_failure("  Exit code:    3", pending);
  ASSERT_TRUE(exited);
  EXPECT_EQ(exited->rank, 3);
  EXPECT_EQ(exited->reason, "exited with code 3");
  EXPECT_EQ(pending, -1);

  // Open MPI wraps this report ("with errorcode 1." follows on the next line).
  auto aborted = parse_mpirun_failure(
      "MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD", pending);
  ASSERT_TRUE(aborted);
  EXPECT_EQ(aborted->rank, 2);
  EXPECT_EQ(aborted->reason, "called MPI_Abort");
  EXPECT_FALSE(parse_mpirun_failure("Primary job  terminated normally, but 1 process returned",
                                    pending));
}

TEST(Launcher, ProgressSteps) {
  EXPECT_EQ(progress_step("step  7/20 | loss 4.1000 | lr 1e-3"), 7);
  EXPECT_EQ(progress_step("step 120/600 | loss 2.0"), 120);
  EXPECT_EQ(progress_step("eval step 100: val loss 2.0"), -1);
  EXPECT_EQ(progress_step("stepping"), -1);
}

// Runs the launcher over a stand-in for mpirun that records each start and exits with
// `exit_code`; returns the launcher's status and how many times it started the job.
std::pair<int, int> launch_with_fake_mpirun(int exit_code, int max_restarts) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("anvil_launcher_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto script = dir / "mpirun";
  const auto starts = dir / "starts";
  std::filesystem::remove(starts);
  {
    std::ofstream out(script);
    out << "#!/bin/sh\necho start >> '" << starts.string() << "'\nexit " << exit_code << "\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  LaunchOptions options;
  options.mpirun = script.string();
  options.program = "anvil";
  options.max_restarts = max_restarts;
  const int status = run_launch(options);
  std::ifstream in(starts);
  int count = 0;
  for (std::string line; std::getline(in, line);) ++count;
  std::filesystem::remove_all(dir);
  return {status, count};
}

TEST(Launcher, RestartsAFailedJobButNotADivergedOne) {
  EXPECT_EQ(launch_with_fake_mpirun(1, 2), std::make_pair(1, 3));  // first start + 2 restarts
  EXPECT_EQ(launch_with_fake_mpirun(kExitDiverged, 2), std::make_pair(kExitDiverged, 1));
  EXPECT_EQ(launch_with_fake_mpirun(0, 2), std::make_pair(0, 1));
}

TEST(Launcher, RestartsRanksThatStoppedOnASignalItDidNotSend) {
  // A SIGTERM to one rank stops every rank cleanly, but the run is not complete.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("anvil_launcher_stop_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto script = dir / "mpirun";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nif [ -e '" << (dir / "started").string() << "' ]; then exit 0; fi\n"
        << "touch '" << (dir / "started").string() << "'\n"
        << "echo '[1,0]<stdout>:stopped by signal 15 after step 3/10; resume with: x'\nexit 0\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  LaunchOptions options;
  options.mpirun = script.string();
  options.program = "anvil";
  options.max_restarts = 1;
  EXPECT_EQ(run_launch(options), 0);
  EXPECT_TRUE(std::filesystem::exists(dir / "started"));
  options.max_restarts = 0;  // the second start finds "started" and succeeds; none allowed now
  std::filesystem::remove(dir / "started");
  EXPECT_EQ(run_launch(options), 1);
  std::filesystem::remove_all(dir);
}

TEST(Launcher, ElasticWorldKeepsTheGlobalBatch) {
  EXPECT_EQ(elastic_world(4, 2, 1, 4), 4);
  EXPECT_EQ(elastic_world(4, 2, 1, 3), 2);  // 3 ranks cannot split 4 micro-batches
  EXPECT_EQ(elastic_world(4, 2, 3, 3), 3);  // 12 micro-batches: 3 ranks x 4
  EXPECT_EQ(elastic_world(4, 2, 1, 1), 0);
  EXPECT_EQ(elastic_world(8, 1, 1, 5), 4);
  EXPECT_EQ(elastic_world(4, 2, 1, 6), 4);  // never more than nproc
  EXPECT_EQ(checkpoint_line_step("checkpoint runs/x/checkpoints/step-0000012 (0.2 s)"), 12);
  EXPECT_EQ(checkpoint_line_step("resumed from runs/x/checkpoints/step-0000012 (step 12)"), -1);
}

// Runs an elastic launch (4 slots, at least 2, grad_accum 1 at 4 ranks) over a stand-in for
// mpirun written by `body` (after it appends its arguments to <dir>/starts); returns the
// launcher's status and the arguments of each start.
std::pair<int, std::vector<std::string>> elastic_launch(const std::string& body,
                                                        const std::string& health_check,
                                                        const std::filesystem::path& dir) {
  const auto script = dir / "mpirun";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\necho \"$*\" >> '" << (dir / "starts").string() << "'\n" << body;
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  LaunchOptions options;
  options.mpirun = script.string();
  options.program = "anvil";
  options.nproc = 4;
  options.min_nproc = 2;
  options.grad_accum = 1;
  options.max_restarts = 2;
  options.health_check = health_check;
  const int status = run_launch(options);
  std::ifstream in(dir / "starts");
  std::vector<std::string> starts;
  for (std::string line; std::getline(in, line);) starts.push_back(line);
  return {status, starts};
}

TEST(Launcher, ElasticLaunchShrinksAndGrowsBack) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("anvil_launcher_elastic_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string back = (dir / "back").string();
  // Slots 2 and 3 are usable once "back" exists. The 2-rank job makes it exist, reports a
  // checkpoint, and stops on the SIGUSR1 the launcher then sends, like the trainer.
  const std::string health = "[ \"$ANVIL_SLOT\" -lt 2 ] || [ -e '" + back + "' ]";
  const std::string body =
      "case \"$*\" in *'-np 2 '*) ;; *) exit 0 ;; esac\n"
      "trap 'echo \"[1,0]<stdout>:stopped by signal 10 after step 4/9; resume with: x\"; "
      "exit 0' USR1\n"
      "touch '" + back + "'\n"
      "echo '[1,0]<stdout>:checkpoint /r/checkpoints/step-0000003 (0.1 s)'\n"
      "i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done\nexit 1\n";
  const auto [status, starts] = elastic_launch(body, health, dir);
  EXPECT_EQ(status, 0);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_NE(starts[0].find("-np 2 "), std::string::npos) << starts[0];
  EXPECT_NE(starts[0].find("--training.grad_accum=2"), std::string::npos) << starts[0];
  EXPECT_NE(starts[1].find("-np 4 "), std::string::npos) << starts[1];
  EXPECT_NE(starts[1].find("--training.grad_accum=1"), std::string::npos) << starts[1];
  std::filesystem::remove_all(dir);
}

TEST(Launcher, AHealthCheckThatHangsLosesItsSlot) {
  LaunchOptions options;
  options.mpirun = "/bin/echo";
  options.program = "anvil";
  options.nproc = 2;
  options.min_nproc = 1;
  options.grad_accum = 1;
  options.health_check = "[ \"$ANVIL_SLOT\" = 0 ] || sleep 30";
  options.health_check_timeout_s = 1;
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(run_launch(options), 0);  // echo stands in for a job that succeeds on 1 rank
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(20));
}

TEST(Launcher, ElasticLaunchDropsASlotWhoseRankFailedAtStart) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("anvil_launcher_lost_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  // Without a health check, rank 3 dying before any step loses its slot; 3 slots cannot keep
  // 4 micro-batches per step, so the job continues on 2.
  const std::string body =
      "case \"$*\" in *'-np 4 '*) ;; *) exit 0 ;; esac\n"
      "echo 'mpirun noticed that process rank 3 with PID 7 on node n exited on signal 9 "
      "(Killed).'\nexit 1\n";
  const auto [status, starts] = elastic_launch(body, "", dir);
  EXPECT_EQ(status, 0);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_NE(starts[1].find("-np 2 "), std::string::npos) << starts[1];
  EXPECT_NE(starts[1].find("--training.grad_accum=2"), std::string::npos) << starts[1];
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace anvil
