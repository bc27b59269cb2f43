// The profile window of a training run (`profile.steps = "A:B"`): every rank records a trace
// (core/trace.h) of steps A..B, from a barrier before step A to the end of step B, writes it
// to <run>/trace/rank-RRRRR.json, and world rank 0 merges the ranks into <run>/trace.json (one
// process track per rank; docs/observability.md "Traces"). Each rank's compute, communication
// and exposed-communication times are gathered to every rank for the summary. Device time: the
// device spans (backend/device_trace.h) of each step are read at its end and join the trace on
// a "device" track; the summary adds this rank's costliest device spans. All files are
// written atomically; a rank that cannot write its file fails the window on every rank, and a
// merge that fails leaves no trace.json. Every method is collective over the world and every
// rank calls it with the same steps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/memory_counters.h"
#include "backend/device_trace.h"
#include "core/trace.h"
#include "parallel/mesh.h"

namespace anvil {

// Steps first..last (1-based, inclusive) are traced; first = 0: none.
struct ProfileWindow {
  int64_t first = 0;
  int64_t last = 0;
  bool enabled() const { return first > 0; }
  bool contains(int64_t step) const { return enabled() && step >= first && step <= last; }
};

// Parses profile.steps: "" is no window, "A:B" steps A..B with 1 <= A <= B <= training_steps;
// anything else throws "[config] profile.steps ..." naming the problem.
ProfileWindow parse_profile_steps(const std::string& text, int64_t training_steps);

// One rank's totals of the window.
struct TraceRankSummary {
  int rank = 0;
  TraceTotals totals;
};

// Returns one rank's totals as JSON: rank, window_s, compute_s, comm_s, exposed_comm_s and
// overlap (null without communication).
nlohmann::ordered_json trace_summary_json(const TraceRankSummary& summary);

// Device time of one span name over a window (device spans, backend/device_trace.h).
struct DeviceSpanTotal {
  std::string name;
  double seconds = 0;
  int64_t count = 0;
};

// Returns the window's device spans summed by name, costliest first.
std::vector<DeviceSpanTotal> device_span_totals(const TraceLog& log);

class StepProfiler {
 public:
  StepProfiler(ProfileWindow window, std::filesystem::path run_dir, Communicator& world);
  // Drops a window still open (an error ended the run inside it): nothing is written.
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Opens the window before `step` when the step is in it and no window was opened yet (a
  // resumed run starts inside it): a barrier, then every rank's clock starts.
  void before_step(int64_t step, const MeshTraffic& traffic, const MemorySnapshot& memory);
  // Records the per-axis byte counter and this rank's memory by category after `step`, and
  // closes the window after its last step.
  void after_step(int64_t step, const MeshTraffic& traffic, const MemorySnapshot& memory);
  // Closes the window if it is still open (the run stopped inside it).
  void finish();

  // Returns every rank's totals once the window has closed (empty before).
  const std::vector<TraceRankSummary>& summaries() const { return summaries_; }
  // Returns this rank's device time by span name once the window has closed, costliest first.
  const std::vector<DeviceSpanTotal>& device_totals() const { return device_totals_; }
  // Returns the summary lines: where the trace is, one line per rank, then this rank's
  // costliest device spans (empty before).
  std::vector<std::string> summary_lines() const;
  // Returns the merged trace's path.
  std::filesystem::path trace_path() const { return run_dir_ / "trace.json"; }

 private:
  void close();
  // Records the bytes counted so far on each mesh axis as the counter "comm bytes", and the
  // bytes held now by category as the counter "memory".
  void record_counters(const MeshTraffic& traffic, const MemorySnapshot& memory);
  std::filesystem::path rank_trace_path(int rank) const;

  ProfileWindow window_;
  std::filesystem::path run_dir_;
  Communicator* world_;
  bool opened_ = false;
  bool open_ = false;
  int64_t first_recorded_ = 0;
  int64_t last_recorded_ = 0;
  std::vector<TraceRankSummary> summaries_;
  std::vector<DeviceSpanTotal> device_totals_;
  static constexpr size_t kDeviceSpansShown = 8;
};

}  // namespace anvil
