// The trace recorder and the per-rank summary (see trace.h). Events go into one vector under
// a mutex: only open windows record, and a window covers a few steps.
#include "core/trace.h"

#include <algorithm>
#include <chrono>

namespace anvil {
namespace {

struct Interval {
  int64_t begin;
  int64_t end;
};

// Returns the intervals merged into a sorted list of disjoint ones.
std::vector<Interval> union_of(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> merged;
  for (const Interval& i : intervals) {
    if (!merged.empty() && i.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, i.end);
    } else {
      merged.push_back(i);
    }
  }
  return merged;
}

int64_t length_of(const std::vector<Interval>& disjoint) {
  int64_t total = 0;
  for (const Interval& i : disjoint) total += i.end - i.begin;
  return total;
}

// Returns the length of the intersection of two sorted lists of disjoint intervals.
int64_t overlap_of(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin);
    const int64_t hi = std::min(a[i].end, b[j].end);
    if (lo < hi) total += hi - lo;
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

TraceRecorder& TraceRecorder::instance() {
  static TraceRecorder recorder;
  return recorder;
}

void TraceRecorder::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  log_ = TraceLog{};
  log_.origin_ns = now_ns();
  session_.store(++last_session_, std::memory_order_relaxed);
}

TraceLog TraceRecorder::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (session_.load(std::memory_order_relaxed) == 0) return TraceLog{};
  session_.store(0, std::memory_order_relaxed);
  log_.end_ns = now_ns();
  TraceLog log = std::move(log_);
  log_ = TraceLog{};
  return log;
}

void TraceRecorder::add(uint64_t session, TraceEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (session == 0 || session != session_.load(std::memory_order_relaxed)) return;
  log_.events.push_back(std::move(event));
}

void TraceRecorder::set_thread_name(std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  log_.thread_names[thread_id()] = std::move(name);
}

int64_t TraceRecorder::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int TraceRecorder::thread_id() {
  static std::atomic<int> next{1};
  thread_local const int id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

TraceSpan::TraceSpan(std::string_view name, const char* category)
    : session_(TraceRecorder::instance().session()), category_(category) {
  if (!active()) return;
  name_ = name;
  begin_ns_ = TraceRecorder::now_ns();
}

void TraceSpan::end() {
  if (!active()) return;
  TraceEvent event;
  event.name = std::move(name_);
  event.category = category_;
  event.begin_ns = begin_ns_;
  event.duration_ns = TraceRecorder::now_ns() - begin_ns_;
  event.thread = TraceRecorder::thread_id();
  event.args = std::move(args_);
  TraceRecorder::instance().add(session_, std::move(event));
  session_ = 0;
}

void trace_counter(std::string_view name, std::span<const TraceCounterValue> values) {
  TraceRecorder& recorder = TraceRecorder::instance();
  const uint64_t session = recorder.session();
  if (session == 0) return;
  TraceEvent event;
  event.phase = 'C';
  event.name = name;
  event.category = "counter";
  event.begin_ns = TraceRecorder::now_ns();
  event.thread = TraceRecorder::thread_id();
  for (const TraceCounterValue& v : values)
    event.args.push_back(TraceArg{std::string(v.name), v.value});
  recorder.add(session, std::move(event));
}

TraceTotals summarize_trace(const TraceLog& log) {
  std::vector<Interval> compute, comm, exposed;
  for (const TraceEvent& e : log.events) {
    if (e.phase != 'X') continue;
    const Interval interval{e.begin_ns, e.begin_ns + e.duration_ns};
    const std::string_view category = e.category;
    if (category == kTraceCompute) compute.push_back(interval);
    if (category == kTraceComm || category == kTraceCommAsync) comm.push_back(interval);
    if (category == kTraceComm || category == kTraceCommWait) exposed.push_back(interval);
  }
  const std::vector<Interval> compute_union = union_of(std::move(compute));
  const std::vector<Interval> exposed_union = union_of(std::move(exposed));
  TraceTotals totals;
  totals.window_s = seconds(log.end_ns - log.origin_ns);
  totals.compute_s = seconds(length_of(compute_union) - overlap_of(compute_union, exposed_union));
  totals.comm_s = seconds(length_of(union_of(std::move(comm))));
  totals.exposed_comm_s = seconds(length_of(exposed_union));
  return totals;
}

}  // namespace anvil
