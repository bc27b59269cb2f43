// Chrome trace-event JSON (the format chrome://tracing and Perfetto load) for the recorder's
// windows (core/trace.h): one document per rank, then one merged document with a process
// (pid = rank, named "rank r") per rank and a thread (tid) per recording thread. Timestamps
// are microseconds since the window opened (fractional: nanosecond resolution). Spans on an
// asynchronous track (collectives in flight) go to extra threads, "<track>" and
// "<track> (2)", ..., assigned greedily so that spans of one thread never partly overlap.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/trace.h"

namespace anvil {

// Thread ids of asynchronous-track lanes start here (recording threads count from 1).
inline constexpr int kTraceFirstLaneThread = 1000;

// Returns rank `rank`'s document: {"traceEvents": [metadata, events...],
// "displayTimeUnit": "ms"}.
nlohmann::json chrome_trace(const TraceLog& log, int rank);

// Returns the document holding every event of the rank documents in `files` (file i must be
// rank i's). Throws "[trace] <file>: ..." when a file cannot be read, is not valid JSON, is
// not a trace document or holds another rank's events.
nlohmann::json merge_chrome_traces(const std::vector<std::filesystem::path>& files);

}  // namespace anvil
