// The stop-signal guard. Each case runs in a forked child (a death test), because it changes
// process-wide signal dispositions: the first signal only raises the flag; once the guard is
// gone the default action is back, unless the guard was told to stay installed, which is what
// keeps a rank alive when mpirun's copy of a stop signal reaches it after the ranks already
// stopped on another rank's copy.
#include "train/signals.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>

namespace anvil {
namespace {

TEST(StopSignalGuardDeathTest, FirstSignalOnlyRaisesTheFlag) {
  EXPECT_EXIT(
      {
        StopSignalGuard guard;
        ::raise(SIGUSR1);
        std::exit(StopSignalGuard::signal_number() == SIGUSR1 ? 0 : 1);
      },
      testing::ExitedWithCode(0), "stopping after the current step");
}

TEST(StopSignalGuardDeathTest, DefaultActionReturnsWithTheGuardsEnd) {
  EXPECT_EXIT(
      {
        { StopSignalGuard guard; }
        ::raise(SIGUSR1);
        std::exit(0);
      },
      testing::KilledBySignal(SIGUSR1), "");
}

TEST(StopSignalGuardDeathTest, KeptHandlersOutliveTheGuard) {
  EXPECT_EXIT(
      {
        {
          StopSignalGuard guard;
          guard.keep_installed();
        }
        ::raise(SIGUSR1);
        std::exit(StopSignalGuard::stop_requested() ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace anvil
