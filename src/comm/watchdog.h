// The collective watchdog: detects a rank that is stuck inside a collective (a peer stopped by
// SIGSTOP, a dead peer the library did not report, a deadlock) and ends the process, so that
// mpirun ends the job and `anvil launch` restarts it from the newest checkpoint. A monitor
// thread wakes a few times per timeout and looks at one record: which collective this process
// is blocked in and since when. Communicators mark each blocking call and each CommHandle::wait
// with a CollectiveScope; time spent outside a scope (compute, I/O) is never timed, so only a
// rank that waits for its peers can trip it. The monitor never calls MPI (the blocked thread
// holds it), it only prints and exits. Higher layers tell it the step and phase it reports.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace anvil {

class CollectiveWatchdog {
 public:
  // Receives the one-line report (no "anvil: error:" prefix, no newline); the default prints
  // it on stderr and ends the process at once (exit status kWatchdogExitCode).
  using TimeoutHandler = std::function<void(const std::string& report)>;
  static constexpr int kWatchdogExitCode = 124;  // the status timeout(1) uses

  // Starts the monitor thread and installs this watchdog as the one CollectiveScope reports
  // to (at most one at a time). `rank` is the rank named in the report; timeout_s > 0.
  CollectiveWatchdog(double timeout_s, int rank, TimeoutHandler on_timeout = {});
  // Uninstalls the watchdog and stops the thread.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Sets the training step the report names (-1: none).
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  // Sets the phase the report names ("checkpoint save"; nullptr: none). Must be a string
  // literal or otherwise outlive the watchdog.
  void set_phase(const char* phase) { phase_.store(phase, std::memory_order_relaxed); }

  // Marks the start and the end of a blocking collective; nested marks count as the outer one.
  void enter(const char* collective);
  void leave();

  // Returns the report line for `collective` blocked for `seconds`, as the monitor prints it.
  std::string report(const char* collective, double seconds) const;

 private:
  void monitor();

  const double timeout_s_;
  const int rank_;
  const TimeoutHandler on_timeout_;
  int depth_ = 0;  // touched only by the thread in a collective (calls are serialised)
  // enter() stores the start time before the name and the monitor reads the name first, so a
  // scope that ends and a new one that begins between its two loads can only look younger.
  std::atomic<const char*> collective_{nullptr};
  std::atomic<int64_t> started_ns_{0};
  std::atomic<int64_t> step_{-1};
  std::atomic<const char*> phase_{nullptr};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// Marks one blocking collective (or wait) for the installed watchdog; a no-op when none is.
class CollectiveScope {
 public:
  explicit CollectiveScope(const char* collective);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  CollectiveWatchdog* watchdog_;
};

}  // namespace anvil
