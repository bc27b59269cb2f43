// Chrome trace documents: a rank's document names its process and threads and rebases time to
// microseconds since the window opened; spans of an asynchronous track go to lanes on which
// no two overlap; merging concatenates the ranks and rejects files that are not one rank's
// trace, naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>

#include "core/error.h"
#include "io/chrome_trace.h"
#include "io/file_util.h"

namespace anvil {
namespace {

TraceEvent span(std::string name, int64_t begin, int64_t end, std::string track = {}) {
  TraceEvent e;
  e.name = std::move(name);
  e.category = track.empty() ? kTraceCompute : kTraceCommAsync;
  e.begin_ns = begin;
  e.duration_ns = end - begin;
  e.thread = 1;
  e.track = std::move(track);
  return e;
}

const nlohmann::json* find_named(const nlohmann::json& events, const std::string& name) {
  for (const nlohmann::json& e : events)
    if (e["name"] == name) return &e;
  return nullptr;
}

TEST(ChromeTrace, RankDocumentNamesProcessAndThreadsInMicroseconds) {
  TraceLog log;
  log.origin_ns = 1'000'000;
  log.end_ns = 1'010'000;
  log.thread_names[1] = "main";
  TraceEvent forward = span("forward layer 0", 1'001'500, 1'003'250);
  forward.args.push_back(TraceArg{"group", int64_t{1}});
  log.events.push_back(forward);
  TraceEvent counter;
  counter.phase = 'C';
  counter.name = "memory";
  counter.category = "counter";
  counter.begin_ns = 1'004'000;
  counter.thread = 1;
  counter.args.push_back(TraceArg{"weights", 2048.0});
  log.events.push_back(counter);

  const nlohmann::json doc = chrome_trace(log, 3);
  const nlohmann::json& events = doc["traceEvents"];
  const nlohmann::json* process = find_named(events, "process_name");
  ASSERT_NE(process, nullptr);
  EXPECT_EQ((*process)["pid"], 3);
  EXPECT_EQ((*process)["args"]["name"], "rank 3");
  const nlohmann::json* thread = find_named(events, "thread_name");
  ASSERT_NE(thread, nullptr);
  EXPECT_EQ((*thread)["tid"], 1);
  EXPECT_EQ((*thread)["args"]["name"], "main");
  const nlohmann::json* f = find_named(events, "forward layer 0");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ((*f)["ph"], "X");
  EXPECT_EQ((*f)["pid"], 3);
  EXPECT_EQ((*f)["tid"], 1);
  EXPECT_DOUBLE_EQ((*f)["ts"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ((*f)["dur"].get<double>(), 1.75);
  EXPECT_EQ((*f)["args"]["group"], 1);
  const nlohmann::json* c = find_named(events, "memory");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["ph"], "C");
  EXPECT_FALSE(c->contains("dur"));
  EXPECT_DOUBLE_EQ((*c)["args"]["weights"].get<double>(), 2048.0);
  for (const nlohmann::json& e : events) {
    for (const char* key : {"name", "ph", "ts", "pid", "tid"}) EXPECT_TRUE(e.contains(key)) << e;
  }
}

TEST(ChromeTrace, TrackSpansGoToLanesWhereNoneOverlap) {
  TraceLog log;
  log.events.push_back(span("a", 0, 10, "fsdp async"));
  log.events.push_back(span("b", 5, 15, "fsdp async"));
  log.events.push_back(span("c", 10, 20, "fsdp async"));
  log.events.push_back(span("d", 2, 4, "data async"));
  const nlohmann::json events = chrome_trace(log, 0)["traceEvents"];
  std::map<std::string, int> tid;
  std::map<int, std::string> thread_name;
  for (const nlohmann::json& e : events) {
    if (e["ph"] == "X") tid[e["name"]] = e["tid"];
    if (e["name"] == "thread_name") thread_name[e["tid"]] = e["args"]["name"];
  }
  EXPECT_EQ(tid["a"], kTraceFirstLaneThread);
  EXPECT_EQ(tid["c"], kTraceFirstLaneThread);  // starts where a ends
  EXPECT_EQ(tid["b"], kTraceFirstLaneThread + 1);
  EXPECT_EQ(tid["d"], kTraceFirstLaneThread + 2);
  EXPECT_EQ(thread_name[tid["a"]], "fsdp async");
  EXPECT_EQ(thread_name[tid["b"]], "fsdp async (2)");
  EXPECT_EQ(thread_name[tid["d"]], "data async");
}

class ChromeTraceMerge : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() /
          ("anvil_chrome_trace_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  std::filesystem::path write_rank(int rank, const std::string& text) {
    const std::filesystem::path path = dir / ("rank-" + std::to_string(rank) + ".json");
    write_file_atomic(path, text);
    return path;
  }

  std::string merge_error(const std::vector<std::filesystem::path>& files) {
    try {
      merge_chrome_traces(files);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir;
};

TEST_F(ChromeTraceMerge, ConcatenatesTheRanks) {
  TraceLog log;
  log.events.push_back(span("forward layer 0", 0, 10));
  const auto zero = write_rank(0, chrome_trace(log, 0).dump());
  const auto one = write_rank(1, chrome_trace(log, 1).dump());
  const nlohmann::json merged = merge_chrome_traces({zero, one});
  std::map<int, int> spans_per_pid;
  for (const nlohmann::json& e : merged["traceEvents"])
    if (e["ph"] == "X") ++spans_per_pid[e["pid"]];
  EXPECT_EQ(spans_per_pid, (std::map<int, int>{{0, 1}, {1, 1}}));
}

TEST_F(ChromeTraceMerge, RejectsFilesThatAreNotThatRanksTrace) {
  TraceLog log;
  const auto zero = write_rank(0, chrome_trace(log, 0).dump());
  const auto broken = write_rank(1, "{\"traceEvents\": [");
  EXPECT_NE(merge_error({zero, broken}).find("[trace] " + broken.string()), std::string::npos);
  const auto not_trace = write_rank(1, "{\"events\": []}");
  EXPECT_NE(merge_error({zero, not_trace}).find("is not a trace document"), std::string::npos);
  const auto other_rank = write_rank(1, chrome_trace(log, 0).dump());
  EXPECT_NE(merge_error({zero, other_rank}).find("should hold rank 1's events"),
            std::string::npos);
  EXPECT_NE(merge_error({zero, dir / "missing.json"}).find("missing.json"), std::string::npos);
}

}  // namespace
}  // namespace anvil
