// Chrome trace documents: serialisation, lane layout of asynchronous tracks, merging (see
// chrome_trace.h).
#include "io/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/error.h"
#include "io/file_util.h"
#include "io/json_util.h"

namespace anvil {
namespace {

// A trace document nests events (level 2) and their args (level 3).
constexpr int kMaxTraceDepth = 8;

double microseconds(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

nlohmann::json metadata(const char* name, int pid, int tid, nlohmann::json args) {
  return {{"name", name}, {"ph", "M"}, {"ts", 0}, {"pid", pid}, {"tid", tid},
          {"args", std::move(args)}};
}

nlohmann::json args_json(const std::vector<TraceArg>& args) {
  nlohmann::json out = nlohmann::json::object();
  for (const TraceArg& a : args) {
    std::visit([&](const auto& v) { out[a.key] = v; }, a.value);
  }
  return out;
}

// Returns the thread each event is written on: its recording thread, or for track events a
// lane of that track such that a lane's spans never overlap. Adds the lanes' names.
std::vector<int> assign_threads(const std::vector<TraceEvent>& events,
                                std::map<int, std::string>& lane_names) {
  std::vector<int> threads(events.size());
  std::map<std::string, std::vector<size_t>> by_track;
  std::vector<std::string> track_order;
  for (size_t i = 0; i < events.size(); ++i) {
    threads[i] = events[i].thread;
    if (events[i].track.empty()) continue;
    auto [it, inserted] = by_track.try_emplace(events[i].track);
    if (inserted) track_order.push_back(events[i].track);
    it->second.push_back(i);
  }
  int next_thread = kTraceFirstLaneThread;
  for (const std::string& track : track_order) {
    std::vector<size_t>& members = by_track[track];
    std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) {
      return events[a].begin_ns < events[b].begin_ns;
    });
    struct Lane {
      int thread;
      int64_t end_ns;
    };
    std::vector<Lane> lanes;
    for (const size_t i : members) {
      const TraceEvent& e = events[i];
      auto lane = std::find_if(lanes.begin(), lanes.end(),
                               [&](const Lane& l) { return l.end_ns <= e.begin_ns; });
      if (lane == lanes.end()) {
        lane_names[next_thread] =
            lanes.empty() ? track : fmt::format("{} ({})", track, lanes.size() + 1);
        lanes.push_back(Lane{next_thread++, 0});
        lane = lanes.end() - 1;
      }
      lane->end_ns = e.begin_ns + e.duration_ns;
      threads[i] = lane->thread;
    }
  }
  return threads;
}

}  // namespace

nlohmann::json chrome_trace(const TraceLog& log, int rank) {
  std::map<int, std::string> lane_names;
  const std::vector<int> threads = assign_threads(log.events, lane_names);
  nlohmann::json events = nlohmann::json::array();
  events.push_back(metadata("process_name", rank, 0, {{"name", fmt::format("rank {}", rank)}}));
  events.push_back(metadata("process_sort_index", rank, 0, {{"sort_index", rank}}));
  std::map<int, std::string> names;
  for (int thread : threads) names.emplace(thread, fmt::format("thread {}", thread));
  for (const auto& [thread, name] : log.thread_names) names[thread] = name;
  for (const auto& [thread, name] : lane_names) names[thread] = name;
  for (const auto& [thread, name] : names) {
    events.push_back(metadata("thread_name", rank, thread, {{"name", name}}));
    events.push_back(metadata("thread_sort_index", rank, thread, {{"sort_index", thread}}));
  }
  for (size_t i = 0; i < log.events.size(); ++i) {
    const TraceEvent& e = log.events[i];
    nlohmann::json event = {{"name", e.name},
                            {"cat", e.category},
                            {"ph", std::string(1, e.phase)},
                            {"ts", microseconds(e.begin_ns - log.origin_ns)},
                            {"pid", rank},
                            {"tid", threads[i]}};
    if (e.phase == 'X') event["dur"] = microseconds(e.duration_ns);
    event["args"] = args_json(e.args);
    events.push_back(std::move(event));
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

nlohmann::json merge_chrome_traces(const std::vector<std::filesystem::path>& files) {
  nlohmann::json merged = nlohmann::json::array();
  for (size_t rank = 0; rank < files.size(); ++rank) {
    const std::string subject = fmt::format("[trace] {}", files[rank].string());
    nlohmann::json document =
        parse_json_strict(read_file(files[rank]), subject, kMaxTraceDepth);
    ANVIL_CHECK(document.is_object() && document.contains("traceEvents") &&
                    document["traceEvents"].is_array(),
                "{} is not a trace document (a JSON object with a traceEvents array)", subject);
    for (nlohmann::json& event : document["traceEvents"]) {
      ANVIL_CHECK(event.is_object() && event.contains("pid") && event["pid"].is_number_integer() &&
                      event["pid"].get<int64_t>() == static_cast<int64_t>(rank),
                  "{} should hold rank {}'s events, but has the event {}", subject, rank,
                  quote_for_message(event.dump()));
      merged.push_back(std::move(event));
    }
  }
  return {{"traceEvents", std::move(merged)}, {"displayTimeUnit", "ms"}};
}

}  // namespace anvil
