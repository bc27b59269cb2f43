// The collective watchdog (see watchdog.h). The default timeout action runs on the monitor
// thread while another thread is blocked, possibly forever, so it takes no lock that thread
// might hold: stdio buffers are flushed only if their lock is free, the report goes out with
// write(2), and the process ends with _exit (atexit handlers would call MPI_Finalize, which
// waits for the very peers that are gone).
#include "comm/watchdog.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"

namespace anvil {
namespace {

std::atomic<CollectiveWatchdog*> g_installed{nullptr};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void flush_if_free(std::FILE* stream) {
  if (ftrylockfile(stream) != 0) return;
  fflush_unlocked(stream);
  funlockfile(stream);
}

[[noreturn]] void print_and_exit(const std::string& report) {
  flush_if_free(stdout);
  flush_if_free(stderr);
  const std::string line = "anvil: error: " + report + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  _exit(CollectiveWatchdog::kWatchdogExitCode);
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(double timeout_s, int rank, TimeoutHandler on_timeout)
    : timeout_s_(timeout_s),
      rank_(rank),
      on_timeout_(on_timeout ? std::move(on_timeout) : TimeoutHandler(print_and_exit)) {
  ANVIL_CHECK(timeout_s > 0, "[watchdog] the timeout must be > 0 s, got {}", timeout_s);
  CollectiveWatchdog* expected = nullptr;
  ANVIL_CHECK(g_installed.compare_exchange_strong(expected, this),
              "[watchdog] a collective watchdog is already running in this process");
  thread_ = std::thread([this] { monitor(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  g_installed.store(nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::enter(const char* collective) {
  if (depth_++ > 0) return;
  started_ns_.store(now_ns(), std::memory_order_relaxed);
  collective_.store(collective, std::memory_order_release);
}

void CollectiveWatchdog::leave() {
  if (--depth_ > 0) return;
  collective_.store(nullptr, std::memory_order_release);
}

std::string CollectiveWatchdog::report(const char* collective, double seconds) const {
  const int64_t step = step_.load(std::memory_order_relaxed);
  const char* phase = phase_.load(std::memory_order_relaxed);
  std::string where;
  if (step >= 0) where = fmt::format("step {}", step);
  if (phase != nullptr) where += fmt::format("{}{}", where.empty() ? "" : ", ", phase);
  return fmt::format(
      "[watchdog] rank {}: {}{} has not completed after {:.1f} s; a peer rank is stopped, dead "
      "or deadlocked (limit: parallel.collective_timeout_s = {:g})",
      rank_, collective, where.empty() ? "" : " (" + where + ")", seconds, timeout_s_);
}

void CollectiveWatchdog::monitor() {
  // Waking ten times per timeout bounds the detection delay at 1.1 x the timeout; a second is
  // often enough for the long timeouts of real runs.
  const auto period = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(std::min(timeout_s_ / 10, 1.0)));
  const auto timeout_ns = static_cast<int64_t>(timeout_s_ * 1e9);
  int64_t reported_start = -1;  // a handler that returns is called once per blocked scope
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    const char* collective = collective_.load(std::memory_order_acquire);
    if (collective == nullptr) continue;
    const int64_t started = started_ns_.load(std::memory_order_relaxed);
    const int64_t blocked = now_ns() - started;
    if (blocked < timeout_ns || started == reported_start) continue;
    reported_start = started;
    on_timeout_(report(collective, static_cast<double>(blocked) / 1e9));
  }
}

CollectiveScope::CollectiveScope(const char* collective)
    : watchdog_(g_installed.load(std::memory_order_acquire)) {
  if (watchdog_ != nullptr) watchdog_->enter(collective);
}

CollectiveScope::~CollectiveScope() {
  if (watchdog_ != nullptr) watchdog_->leave();
}

}  // namespace anvil
