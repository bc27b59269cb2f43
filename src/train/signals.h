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
};

// Fault injection for the restart tests: when ANVIL_TEST_KILL_AT_STEP equals `step`, the rank
// ANVIL_TEST_KILL_RANK (default: the last one) kills itself with SIGKILL, once per launch
// (only while ANVIL_LAUNCH_ATTEMPT, set by `anvil launch`, is absent or 0).
void kill_self_if_test_asks(int64_t step, int rank, int world_size);

// Fault injection for the divergence tests: returns true when ANVIL_TEST_NAN_AT_STEP equals
// `step` (the trainer then puts a NaN into that step's loss mask on data rank 0).
bool test_asks_nan_at_step(int64_t step);

}  // namespace anvil
