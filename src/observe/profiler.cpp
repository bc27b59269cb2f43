// The profile window (see profiler.h).
#include "observe/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <string_view>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "io/chrome_trace.h"
#include "io/file_util.h"
#include "parallel/collectives.h"

namespace anvil {
namespace {

std::optional<int64_t> parse_step(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return {};
  return value;
}

// Throws the same error on every rank when any rank passes a non-empty `error`: the message
// of the lowest such rank.
void agree_on_error(Communicator& world, const std::string& error) {
  const int64_t mine = error.empty() ? world.size() : world.rank();
  const std::vector<int64_t> all = all_gather_int64s(world, std::span<const int64_t>(&mine, 1));
  const int64_t first = *std::min_element(all.begin(), all.end());
  if (first == world.size()) return;
  std::string message = error;
  broadcast_string(world, message, static_cast<int>(first));
  ANVIL_FAIL("{}", message);
}

std::string milliseconds(double s) { return fmt::format("{:.2f} ms", s * 1e3); }

}  // namespace

nlohmann::ordered_json trace_summary_json(const TraceRankSummary& s) {
  const double overlap = s.totals.overlap();
  return {{"rank", s.rank},
          {"window_s", s.totals.window_s},
          {"compute_s", s.totals.compute_s},
          {"comm_s", s.totals.comm_s},
          {"exposed_comm_s", s.totals.exposed_comm_s},
          {"overlap", overlap >= 0 ? nlohmann::ordered_json(overlap) : nlohmann::ordered_json()}};
}

ProfileWindow parse_profile_steps(const std::string& text, int64_t training_steps) {
  if (text.empty()) return {};
  const std::string_view view = text;
  const size_t colon = view.find(':');
  const std::optional<int64_t> first =
      colon == view.npos ? std::nullopt : parse_step(view.substr(0, colon));
  const std::optional<int64_t> last =
      colon == view.npos ? std::nullopt : parse_step(view.substr(colon + 1));
  ANVIL_CHECK(first && last,
              "[config] profile.steps must be \"A:B\" (trace steps A to B, e.g. \"3:5\") or "
              "empty, got \"{}\"",
              text);
  ANVIL_CHECK(*first >= 1, "[config] profile.steps = \"{}\": steps count from 1", text);
  ANVIL_CHECK(*first <= *last,
              "[config] profile.steps = \"{}\": the first step {} is after the last step {}", text,
              *first, *last);
  ANVIL_CHECK(*last <= training_steps,
              "[config] profile.steps = \"{}\": step {} is past training.steps = {}", text, *last,
              training_steps);
  return ProfileWindow{*first, *last};
}

StepProfiler::StepProfiler(ProfileWindow window, std::filesystem::path run_dir,
                           Communicator& world)
    : window_(window), run_dir_(std::move(run_dir)), world_(&world) {}

StepProfiler::~StepProfiler() {
  if (open_) TraceRecorder::instance().stop();
}

void StepProfiler::before_step(int64_t step, const MeshTraffic& traffic,
                               const MemorySnapshot& memory) {
  if (opened_ || !window_.contains(step)) return;
  world_->barrier();  // the ranks' clocks start together (to within the barrier's exit skew)
  TraceRecorder& recorder = TraceRecorder::instance();
  recorder.start();
  recorder.set_thread_name("main");
  opened_ = open_ = true;
  first_recorded_ = step;
  record_counters(traffic, memory);
}

void StepProfiler::after_step(int64_t step, const MeshTraffic& traffic,
                              const MemorySnapshot& memory) {
  if (!open_) return;
  flush_device_spans();  // waits for the device to reach the step's spans
  record_counters(traffic, memory);
  last_recorded_ = step;
  if (step == window_.last) close();
}

void StepProfiler::record_counters(const MeshTraffic& traffic, const MemorySnapshot& memory) {
  trace_counter("comm bytes", {{"tp", static_cast<double>(traffic.tp)},
                               {"cp", static_cast<double>(traffic.cp)},
                               {"data", static_cast<double>(traffic.data)},
                               {"dp", static_cast<double>(traffic.dp)},
                               {"fsdp", static_cast<double>(traffic.fsdp)}});
  std::array<TraceCounterValue, kMemoryCategoryCount> bytes;
  for (size_t c = 0; c < bytes.size(); ++c)
    bytes[c] = {kMemoryCategoryNames[c], static_cast<double>(memory.current[c])};
  trace_counter("memory", bytes);
}

std::filesystem::path StepProfiler::rank_trace_path(int rank) const {
  return run_dir_ / "trace" / fmt::format("rank-{:05d}.json", rank);
}

void StepProfiler::finish() {
  if (open_) close();
}

void StepProfiler::close() {
  open_ = false;
  flush_device_spans();
  const TraceLog log = TraceRecorder::instance().stop();
  device_totals_ = device_span_totals(log);
  const int rank = world_->rank();
  std::string error;
  try {
    std::filesystem::create_directories(rank_trace_path(rank).parent_path());
    write_file_atomic(rank_trace_path(rank), chrome_trace(log, rank).dump());
  } catch (const std::exception& e) {
    error = fmt::format("[trace] rank {} could not write its trace: {}", rank, e.what());
  }
  agree_on_error(*world_, error);

  const TraceTotals totals = summarize_trace(log);
  const double mine[] = {totals.window_s, totals.compute_s, totals.comm_s, totals.exposed_comm_s};
  const std::vector<double> all = all_gather_doubles(*world_, mine);
  summaries_.clear();
  for (int r = 0; r < world_->size(); ++r) {
    const double* v = all.data() + static_cast<size_t>(r) * std::size(mine);
    summaries_.push_back(TraceRankSummary{r, TraceTotals{v[0], v[1], v[2], v[3]}});
  }

  if (rank == 0) {
    try {
      std::vector<std::filesystem::path> files;
      for (int r = 0; r < world_->size(); ++r) files.push_back(rank_trace_path(r));
      nlohmann::json merged = merge_chrome_traces(files);
      nlohmann::json ranks = nlohmann::json::array();
      for (const TraceRankSummary& s : summaries_)
        ranks.push_back(nlohmann::json(trace_summary_json(s)));
      merged["otherData"] = {
          {"steps", fmt::format("{}:{}", first_recorded_, last_recorded_)},
          {"clock", "microseconds since the ranks left a barrier before the first step"},
          {"summary", std::move(ranks)}};
      write_file_atomic(trace_path(), merged.dump());
    } catch (const std::exception& e) {
      error = fmt::format("[trace] could not merge the ranks' traces into {}: {}",
                          trace_path().string(), e.what());
    }
  }
  agree_on_error(*world_, error);
}

std::vector<std::string> StepProfiler::summary_lines() const {
  if (summaries_.empty()) return {};
  std::vector<std::string> lines;
  lines.push_back(fmt::format("trace of steps {}-{} ({} rank{}): {}", first_recorded_,
                              last_recorded_, summaries_.size(),
                              summaries_.size() == 1 ? "" : "s", trace_path().string()));
  for (const TraceRankSummary& s : summaries_) {
    const double overlap = s.totals.overlap();
    lines.push_back(fmt::format(
        "trace rank {}: compute {} | comm {} | exposed comm {} | overlap {} | window {}", s.rank,
        milliseconds(s.totals.compute_s), milliseconds(s.totals.comm_s),
        milliseconds(s.totals.exposed_comm_s),
        overlap >= 0 ? fmt::format("{:.1f}%", overlap * 100.0) : std::string("n/a"),
        milliseconds(s.totals.window_s)));
  }
  // This rank's device time by span name, costliest first (spans nest: a layer's time holds
  // its attention's).
  const size_t shown = std::min<size_t>(device_totals_.size(), kDeviceSpansShown);
  for (size_t i = 0; i < shown; ++i) {
    const DeviceSpanTotal& d = device_totals_[i];
    const double window_s = summaries_[static_cast<size_t>(world_->rank())].totals.window_s;
    lines.push_back(fmt::format("device time rank {}: {} {} ({} x, {:.1f}% of the window)",
                                world_->rank(), d.name, milliseconds(d.seconds), d.count,
                                100.0 * d.seconds / std::max(1e-12, window_s)));
  }
  return lines;
}

std::vector<DeviceSpanTotal> device_span_totals(const TraceLog& log) {
  std::map<std::string, DeviceSpanTotal> by_name;
  for (const TraceEvent& event : log.events) {
    if (event.phase != 'X' || std::string_view(event.category) != kTraceDevice) continue;
    DeviceSpanTotal& total = by_name[event.name];
    total.name = event.name;
    total.seconds += static_cast<double>(event.duration_ns) * 1e-9;
    ++total.count;
  }
  std::vector<DeviceSpanTotal> totals;
  for (auto& [name, total] : by_name) totals.push_back(std::move(total));
  std::stable_sort(totals.begin(), totals.end(),
                   [](const DeviceSpanTotal& a, const DeviceSpanTotal& b) {
                     return a.seconds > b.seconds;
                   });
  return totals;
}

}  // namespace anvil
