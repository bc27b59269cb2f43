// The trace recorder: spans (Chrome trace "complete" events) and counters that the engine, the
// communicators, the backends and the trainer record while a profile window is open
// (`--profile.steps`, docs/observability.md "Traces"). One recorder per process, thread-safe.
// Invariants: outside a window every entry point costs one relaxed atomic load and records
// nothing; an event belongs to the window (session) it began in and is dropped if that window
// has closed, so a window's events all lie inside it; spans of one thread nest (RAII scopes on
// a steady clock), while spans given a `track` (asynchronous work that may overlap other work
// on its track, e.g. collectives in flight) are laid out on lanes when written
// (io/chrome_trace.h). Timestamps are steady-clock nanoseconds; writers rebase them.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace anvil {

// Categories the trace summary reads (summarize_trace). Other categories ("step", "data",
// "eval", "checkpoint", "copy") only label spans.
inline constexpr const char* kTraceCompute = "compute";  // forward, backward, optimizer work
inline constexpr const char* kTraceComm = "comm";        // a blocking collective (caller waits)
// Starting, testing or waiting for an asynchronous collective: the caller is blocked.
inline constexpr const char* kTraceCommWait = "comm_wait";
// An asynchronous collective from its start to the moment its completion was seen (a track).
inline constexpr const char* kTraceCommAsync = "comm_async";

using TraceValue = std::variant<int64_t, double, std::string>;

struct TraceArg {
  std::string key;
  TraceValue value;
};

// Returns `value` as a TraceValue: integers (bool included) as int64_t, floating point as
// double, anything string-like as std::string.
template <typename T>
TraceValue to_trace_value(const T& value) {
  if constexpr (std::is_same_v<T, bool> || std::integral<T>) {
    return static_cast<int64_t>(value);
  } else if constexpr (std::floating_point<T>) {
    return static_cast<double>(value);
  } else {
    return std::string(std::string_view(value));
  }
}

struct TraceEvent {
  char phase = 'X';  // 'X' a complete span, 'C' a counter (args are its named values)
  std::string name;
  const char* category = "";
  int64_t begin_ns = 0;  // steady clock
  int64_t duration_ns = 0;
  int thread = 0;     // the recording thread's trace id (1, 2, ... in order of first use)
  std::string track;  // non-empty: an asynchronous track, laid out on lanes when written
  std::vector<TraceArg> args;
};

// What one window recorded.
struct TraceLog {
  int64_t origin_ns = 0;  // steady clock at start()
  int64_t end_ns = 0;     // at stop()
  std::vector<TraceEvent> events;
  std::map<int, std::string> thread_names;  // trace thread id -> name (named threads only)
};

class TraceRecorder {
 public:
  // Returns the process's recorder.
  static TraceRecorder& instance();

  // Returns the open window's session id, 0 when none is open.
  uint64_t session() const { return session_.load(std::memory_order_relaxed); }
  bool recording() const { return session() != 0; }
  // Opens a window: forgets earlier events and starts a new session.
  void start();
  // Closes the window and returns its events in recording order (empty when none was open).
  TraceLog stop();
  // Adds an event that began in `session`; dropped when that window is no longer open.
  void add(uint64_t session, TraceEvent event);
  // Names the calling thread in the written trace ("main").
  void set_thread_name(std::string name);

  // Returns the steady clock in nanoseconds.
  static int64_t now_ns();
  // Returns the calling thread's trace id.
  static int thread_id();

 private:
  TraceRecorder() = default;

  std::atomic<uint64_t> session_{0};
  uint64_t last_session_ = 0;
  std::mutex mutex_;
  TraceLog log_;
};

// Returns whether a profile window is open (one relaxed atomic load).
inline bool trace_recording() { return TraceRecorder::instance().recording(); }

// A span from construction to end() or destruction, recorded when a window was open at
// construction (and still is at the end). Arguments show beside it in the viewer.
class TraceSpan {
 public:
  TraceSpan(std::string_view name, const char* category);
  ~TraceSpan() { end(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  bool active() const { return session_ != 0; }
  // Adds an argument (only while active, so a closed window costs nothing).
  template <typename T>
  TraceSpan& arg(const char* key, const T& value) {
    if (active()) args_.push_back(TraceArg{key, to_trace_value(value)});
    return *this;
  }
  // Records the span now; later calls do nothing.
  void end();

 private:
  uint64_t session_;
  int64_t begin_ns_ = 0;
  std::string name_;
  const char* category_;
  std::vector<TraceArg> args_;
};

// One named value of a counter.
struct TraceCounterValue {
  std::string_view name;
  double value;
};

// Records counter `name` with its current values (Chrome "C" event: a stacked chart per
// counter name, one series per value name), e.g. trace_counter("memory", {{"weights", w},
// {"gradients", g}}). Does nothing outside a window.
void trace_counter(std::string_view name, std::span<const TraceCounterValue> values);
inline void trace_counter(std::string_view name, std::initializer_list<TraceCounterValue> values) {
  trace_counter(name, std::span<const TraceCounterValue>(values.begin(), values.size()));
}

// Time a rank spent, by the definitions of docs/observability.md ("Traces"):
//   comm     the union of every collective's interval: blocking ones ("comm") and
//            asynchronous ones from start to seen completion ("comm_async");
//   exposed  the union of the intervals in which a thread was blocked in communication
//            (blocking collectives, and starting, testing or waiting for async ones);
//   compute  the union of the compute spans ("compute") less the exposed time inside them;
//   overlap  1 - exposed / comm: the part of communication hidden behind other work
//            (undefined, reported as -1, when there was no communication).
struct TraceTotals {
  double window_s = 0;  // start() to stop()
  double compute_s = 0;
  double comm_s = 0;
  double exposed_comm_s = 0;
  double overlap() const { return comm_s > 0 ? 1.0 - exposed_comm_s / comm_s : -1.0; }
};

// Returns the totals of one rank's window.
TraceTotals summarize_trace(const TraceLog& log);

}  // namespace anvil
