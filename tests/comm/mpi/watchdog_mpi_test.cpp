// The collective watchdog inside the MPI communicator: while the last rank is late (it sleeps,
// outside any collective), every other rank is blocked in the collective and its watchdog
// reports that collective by name, for a blocking call and for the wait() of an async one.
// The late rank's own watchdog is not checked: on an oversubscribed machine its collective may
// itself take longer than the tiny timeout once it arrives.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace anvil {
namespace {

constexpr double kTimeout = 0.1;
constexpr auto kLateBy = std::chrono::seconds(2);

class WatchdogReports {
 public:
  CollectiveWatchdog::TimeoutHandler handler() {
    return [this](const std::string& report) {
      std::lock_guard<std::mutex> lock(mutex_);
      reports_.push_back(report);
    };
  }
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reports_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> reports_;
};

// Runs `collective` on every rank with the last rank late, then checks the others' reports.
template <typename Collective>
void expect_reported_while_last_rank_is_late(const char* name, Collective collective) {
  Communicator& world = anvil::world();
  const bool late = world.rank() == world.size() - 1;
  WatchdogReports reports;
  {
    CollectiveWatchdog watchdog(kTimeout, world.rank(), reports.handler());
    watchdog.set_step(5);
    if (late) std::this_thread::sleep_for(kLateBy);
    collective(world);
  }
  world.barrier();
  if (late) return;
  const std::vector<std::string> seen = reports.all();
  ASSERT_EQ(seen.size(), 1u) << "rank " << world.rank() << " saw " << seen.size() << " reports";
  const std::string expected =
      "[watchdog] rank " + std::to_string(world.rank()) + ": " + name + " (step 5)";
  EXPECT_EQ(seen[0].substr(0, expected.size()), expected) << seen[0];
}

TEST(MpiWatchdog, ReportsRanksBlockedInABarrier) {
  expect_reported_while_last_rank_is_late("barrier", [](Communicator& world) { world.barrier(); });
}

TEST(MpiWatchdog, ReportsRanksBlockedInAnOrderedAllReduce) {
  expect_reported_while_last_rank_is_late("all_reduce", [](Communicator& world) {
    std::vector<float> values(64, 1.0f);
    world.all_reduce(Tensor(values.data(), DType::f32, Shape{64}), ReduceOp::ordered_sum);
  });
}

TEST(MpiWatchdog, ReportsRanksBlockedWaitingForAnAsyncCollective) {
  expect_reported_while_last_rank_is_late("all_gather_async", [](Communicator& world) {
    std::vector<float> in(4, 1.0f);
    std::vector<float> out(4 * static_cast<size_t>(world.size()));
    world
        .all_gather_async(Tensor(in.data(), DType::f32, Shape{4}),
                          Tensor(out.data(), DType::f32, Shape{static_cast<int64_t>(out.size())}))
        ->wait();
  });
}

}  // namespace
}  // namespace anvil
