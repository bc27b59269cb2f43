// Signal handlers (async-signal-safe only: an atomic flag, write(2), signal(2), raise(3)) and
// the fault-injection hooks of the restart and hang tests.
#include "train/signals.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace anvil {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int;
struct sigaction g_previous_term;
struct sigaction g_previous_usr1;

void on_stop_signal(int signal) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, signal)) {
    static const char kNote[] =
        "\nanvil: stopping after the current step and writing a checkpoint "
        "(send the signal again to abort at once)\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kNote, sizeof(kNote) - 1);
    return;
  }
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

}  // namespace

StopSignalGuard::StopSignalGuard() {
  g_signal.store(0);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGUSR1, &action, &g_previous_usr1);
}

StopSignalGuard::~StopSignalGuard() {
  if (keep_installed_) return;
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
}

bool StopSignalGuard::stop_requested() { return g_signal.load() != 0; }

int StopSignalGuard::signal_number() { return g_signal.load(); }

namespace {

// Returns whether the fault of `step_variable` (ANVIL_TEST_KILL_AT_STEP, ...) is due now on
// this rank: the step matches, this is the first attempt, and `rank_variable` names this rank
// (absent: the last rank).
bool test_fault_due(const char* step_variable, const char* rank_variable, int64_t step, int rank,
                    int world_size) {
  const char* at = std::getenv(step_variable);
  if (at == nullptr || std::atoll(at) != step) return false;
  const char* attempt = std::getenv("ANVIL_LAUNCH_ATTEMPT");
  if (attempt != nullptr && std::string(attempt) != "0") return false;
  const char* victim = std::getenv(rank_variable);
  return (victim != nullptr ? std::atoi(victim) : world_size - 1) == rank;
}

}  // namespace

void kill_self_if_test_asks(int64_t step, int rank, int world_size) {
  if (!test_fault_due("ANVIL_TEST_KILL_AT_STEP", "ANVIL_TEST_KILL_RANK", step, rank, world_size))
    return;
  std::fflush(stdout);
  fmt::print(stderr, "anvil: test: rank {} kills itself with SIGKILL after step {} "
             "(ANVIL_TEST_KILL_AT_STEP)\n", rank, step);
  std::fflush(stderr);
  ::raise(SIGKILL);
}

void stop_self_if_test_asks(int64_t step, int rank, int world_size) {
  if (!test_fault_due("ANVIL_TEST_STOP_AT_STEP", "ANVIL_TEST_STOP_RANK", step, rank, world_size))
    return;
  std::fflush(stdout);
  fmt::print(stderr, "anvil: test: rank {} stops itself with SIGSTOP after step {} "
             "(ANVIL_TEST_STOP_AT_STEP)\n", rank, step);
  std::fflush(stderr);
  ::raise(SIGSTOP);
}

bool test_asks_nan_at_step(int64_t step) {
  const char* at = std::getenv("ANVIL_TEST_NAN_AT_STEP");
  return at != nullptr && std::atoll(at) == step;
}

}  // namespace anvil
