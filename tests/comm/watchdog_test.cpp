// The collective watchdog on its own: a scope held past a tiny timeout reaches the handler
// with a report naming the rank, the collective, the step and the phase; work outside a scope
// and scopes that end in time never do; the default action ends the process with status 124.
// Timeouts are 50 ms and the waits for a report up to 10 s, so a loaded machine only slows the
// tests down.
#include "comm/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace anvil {
namespace {

using namespace std::chrono_literals;

constexpr double kTimeout = 0.05;

// Collects the reports of a watchdog's handler.
class Reports {
 public:
  CollectiveWatchdog::TimeoutHandler handler() {
    return [this](const std::string& report) {
      std::lock_guard<std::mutex> lock(mutex_);
      reports_.push_back(report);
      arrived_.notify_all();
    };
  }
  // Returns the first report, waiting up to 10 s for it (empty: none came).
  std::string first() {
    std::unique_lock<std::mutex> lock(mutex_);
    arrived_.wait_for(lock, 10s, [this] { return !reports_.empty(); });
    return reports_.empty() ? std::string() : reports_.front();
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reports_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<std::string> reports_;
};

TEST(CollectiveWatchdogTest, ReportsAScopeHeldPastTheTimeout) {
  Reports reports;
  CollectiveWatchdog watchdog(kTimeout, 3, reports.handler());
  watchdog.set_step(12);
  const CollectiveScope scope("all_reduce");
  EXPECT_EQ(reports.first().substr(0, 57),
            "[watchdog] rank 3: all_reduce (step 12) has not completed");
  EXPECT_NE(reports.first().find(" s; a peer rank is stopped, dead or deadlocked"),
            std::string::npos);
  EXPECT_NE(reports.first().find("parallel.collective_timeout_s = 0.05"), std::string::npos);
}

TEST(CollectiveWatchdogTest, NamesTheOuterScopeAndThePhase) {
  Reports reports;
  CollectiveWatchdog watchdog(kTimeout, 0, reports.handler());
  watchdog.set_step(6);
  watchdog.set_phase("checkpoint save");
  const CollectiveScope outer("barrier");
  const CollectiveScope inner("all_reduce_async");
  EXPECT_NE(reports.first().find("rank 0: barrier (step 6, checkpoint save) has not completed"),
            std::string::npos)
      << reports.first();
}

TEST(CollectiveWatchdogTest, ReportsOncePerBlockedScope) {
  Reports reports;
  CollectiveWatchdog watchdog(kTimeout, 1, reports.handler());
  {
    const CollectiveScope scope("recv");
    EXPECT_FALSE(reports.first().empty());
    std::this_thread::sleep_for(200ms);  // several more monitor rounds
  }
  EXPECT_EQ(reports.count(), 1u);
}

TEST(CollectiveWatchdogTest, IgnoresWorkOutsideScopesAndScopesThatEndInTime) {
  Reports reports;
  // A longer timeout, so a loaded machine cannot stretch a 5 ms scope past it.
  CollectiveWatchdog watchdog(0.3, 0, reports.handler());
  std::this_thread::sleep_for(600ms);  // compute or I/O: no collective is blocked
  for (int i = 0; i < 20; ++i) {
    const CollectiveScope scope("all_gather");
    std::this_thread::sleep_for(5ms);
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(reports.count(), 0u);
}

TEST(CollectiveWatchdogTest, ScopesWithoutAWatchdogDoNothing) {
  const CollectiveScope scope("barrier");
  Reports reports;
  {
    CollectiveWatchdog watchdog(kTimeout, 0, reports.handler());
  }
  const CollectiveScope after("barrier");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(reports.count(), 0u);
}

TEST(CollectiveWatchdogTest, OneWatchdogPerProcessAndPositiveTimeouts) {
  CollectiveWatchdog watchdog(10, 0, [](const std::string&) {});
  EXPECT_THROW(CollectiveWatchdog(10, 0, [](const std::string&) {}), Error);
  EXPECT_THROW(CollectiveWatchdog(0, 0, [](const std::string&) {}), Error);
}

TEST(CollectiveWatchdogDeathTest, DefaultActionPrintsOneLineAndExits) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        CollectiveWatchdog watchdog(kTimeout, 2);
        watchdog.set_step(7);
        const CollectiveScope scope("all_reduce");
        std::this_thread::sleep_for(20s);
      },
      testing::ExitedWithCode(CollectiveWatchdog::kWatchdogExitCode),
      "anvil: error: \\[watchdog\\] rank 2: all_reduce \\(step 7\\) has not completed");
}

}  // namespace
}  // namespace anvil
