// Graceful stop on SIGINT, SIGTERM and SIGUSR1 (what `anvil launch` sends: mpirun forwards
// SIGUSR1 to every rank, while its own SIGTERM path kills ranks a second later). The first
// signal only raises a flag: the trainer finishes the step in flight, writes a checkpoint and
// exits 0 with the command that resumes.
// A second signal restores the default action and re-raises it, so an impatient Ctrl-C still
// kills the process at once (the last committed checkpoint stays valid).
#pragma once

#include <cstdint>

namespace anvil {

// Installs the handlers for the lifetime of the returned guard; restores the previous ones
// when it is destroyed.
class StopSignalGuard {
 public:
  StopSignalGuard();
  ~StopSignalGuard();
  StopSignalGuard(const StopSignalGuard&) = delete;
  StopSignalGuard& operator=(const StopSignalGuard&) = delete;

  // Returns true once SIGINT, SIGTERM or SIGUSR1 has arrived.
  static bool stop_requested();
  // Returns the number of the first signal received (0 when none).
  static int signal_number();
  // Leaves the handlers installed after the guard is gone. For a process that stops on a
  // signal that reached another rank first: its own copy of the signal (mpirun forwards one
  // to every rank, not all at the same instant) may still be on its way, and under the default
  // action it would kill the process after its checkpoint, turning a clean stop into a failure.
  void keep_installed() { keep_installed_ = true; }

 private:
  bool keep_installed_ = false;
};

// Fault injection for the restart tests: when ANVIL_TEST_KILL_AT_STEP equals `step`, the rank
// ANVIL_TEST_KILL_RANK (default: the last one) kills itself with SIGKILL, once per launch
// (only while ANVIL_LAUNCH_ATTEMPT, set by `anvil launch`, is absent or 0).
void kill_self_if_test_asks(int64_t step, int rank, int world_size);
// Hang injection for the watchdog tests: the same with ANVIL_TEST_STOP_AT_STEP and
// ANVIL_TEST_STOP_RANK, and the rank stops itself with SIGSTOP, so its peers block in their
// next collective exactly as behind a frozen or unreachable rank.
void stop_self_if_test_asks(int64_t step, int rank, int world_size);

// Fault injection for the divergence tests: returns true when ANVIL_TEST_NAN_AT_STEP equals
// `step` (the trainer then puts a NaN into that step's loss mask on data rank 0).
bool test_asks_nan_at_step(int64_t step);

}  // namespace anvil
