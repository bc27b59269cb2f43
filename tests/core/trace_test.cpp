// The trace recorder: nothing is recorded outside a window, spans nest and carry their
// arguments, counters keep their named values, an event begun in a closed window never lands
// in a later one, threads get their own ids, and the summary's compute, communication and
// exposed-communication times follow their definitions on hand-made intervals.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "core/trace.h"

namespace anvil {
namespace {

const TraceEvent* find_event(const TraceLog& log, std::string_view name) {
  for (const TraceEvent& e : log.events)
    if (e.name == name) return &e;
  return nullptr;
}

TEST(TraceRecorder, RecordsNothingOutsideAWindow) {
  TraceRecorder& recorder = TraceRecorder::instance();
  { TraceSpan span("before", "compute"); }
  trace_counter("memory", {{"weights", 1.0}});
  EXPECT_FALSE(trace_recording());
  EXPECT_TRUE(recorder.stop().events.empty());

  TraceSpan opened_before("opened before the window", "compute");
  EXPECT_FALSE(opened_before.active());
  recorder.start();
  EXPECT_TRUE(trace_recording());
  opened_before.end();
  const TraceLog log = recorder.stop();
  EXPECT_TRUE(log.events.empty());
  EXPECT_FALSE(trace_recording());
}

TEST(TraceRecorder, SpansNestAndCarryTheirArguments) {
  TraceRecorder& recorder = TraceRecorder::instance();
  recorder.start();
  recorder.set_thread_name("main");
  {
    TraceSpan outer("step", "step");
    outer.arg("step", 3).arg("lr", 0.5).arg("axis", "fsdp").arg("applied", true);
    { TraceSpan inner("forward layer 0", kTraceCompute); }
  }
  const TraceLog log = recorder.stop();
  ASSERT_EQ(log.events.size(), 2u);
  const TraceEvent* outer = find_event(log, "step");
  const TraceEvent* inner = find_event(log, "forward layer 0");
  ASSERT_TRUE(outer && inner);
  EXPECT_EQ(outer->phase, 'X');
  EXPECT_STREQ(inner->category, kTraceCompute);
  EXPECT_GE(inner->begin_ns, outer->begin_ns);
  EXPECT_LE(inner->begin_ns + inner->duration_ns, outer->begin_ns + outer->duration_ns);
  EXPECT_GE(outer->begin_ns, log.origin_ns);
  EXPECT_LE(outer->begin_ns + outer->duration_ns, log.end_ns);
  ASSERT_EQ(outer->args.size(), 4u);
  EXPECT_EQ(outer->args[0].key, "step");
  EXPECT_EQ(std::get<int64_t>(outer->args[0].value), 3);
  EXPECT_EQ(std::get<double>(outer->args[1].value), 0.5);
  EXPECT_EQ(std::get<std::string>(outer->args[2].value), "fsdp");
  EXPECT_EQ(std::get<int64_t>(outer->args[3].value), 1);
  EXPECT_EQ(outer->thread, TraceRecorder::thread_id());
  EXPECT_EQ(log.thread_names.at(TraceRecorder::thread_id()), "main");
}

TEST(TraceRecorder, CountersKeepTheirNamedValues) {
  TraceRecorder& recorder = TraceRecorder::instance();
  recorder.start();
  const std::vector<TraceCounterValue> values = {{"weights", 1024.0}, {"gradients", 512.0}};
  trace_counter("memory", values);
  const TraceLog log = recorder.stop();
  ASSERT_EQ(log.events.size(), 1u);
  const TraceEvent& e = log.events[0];
  EXPECT_EQ(e.phase, 'C');
  EXPECT_EQ(e.name, "memory");
  ASSERT_EQ(e.args.size(), 2u);
  EXPECT_EQ(e.args[0].key, "weights");
  EXPECT_EQ(std::get<double>(e.args[0].value), 1024.0);
  EXPECT_EQ(e.args[1].key, "gradients");
  EXPECT_EQ(std::get<double>(e.args[1].value), 512.0);
}

TEST(TraceRecorder, AnEventOfAClosedWindowNeverLandsInTheNext) {
  TraceRecorder& recorder = TraceRecorder::instance();
  recorder.start();
  auto straddling = std::make_unique<TraceSpan>("straddling", "compute");
  recorder.stop();
  recorder.start();
  straddling.reset();
  { TraceSpan fresh("fresh", "compute"); }
  const TraceLog log = recorder.stop();
  ASSERT_EQ(log.events.size(), 1u);
  EXPECT_EQ(log.events[0].name, "fresh");
}

TEST(TraceRecorder, ThreadsRecordConcurrentlyUnderTheirOwnIds) {
  TraceRecorder& recorder = TraceRecorder::instance();
  recorder.start();
  constexpr int kThreads = 4, kSpans = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kSpans; ++i) TraceSpan span("work", "compute");
    });
  }
  for (std::thread& thread : threads) thread.join();
  const TraceLog log = recorder.stop();
  ASSERT_EQ(log.events.size(), static_cast<size_t>(kThreads * kSpans));
  std::vector<int> ids;
  for (const TraceEvent& e : log.events) {
    if (std::find(ids.begin(), ids.end(), e.thread) == ids.end()) ids.push_back(e.thread);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kThreads));
  EXPECT_EQ(std::find(ids.begin(), ids.end(), TraceRecorder::thread_id()), ids.end());
}

TraceEvent span_at(const char* category, int64_t begin, int64_t end, std::string track = {}) {
  TraceEvent e;
  e.name = category;
  e.category = category;
  e.begin_ns = begin;
  e.duration_ns = end - begin;
  e.thread = 1;
  e.track = std::move(track);
  return e;
}

TEST(TraceSummary, FollowsTheDefinitions) {
  TraceLog log;
  log.origin_ns = 0;
  log.end_ns = 1000;
  // Compute [0, 100) holding a blocking collective [50, 70); compute [150, 250).
  log.events.push_back(span_at(kTraceCompute, 0, 100));
  log.events.push_back(span_at(kTraceComm, 50, 70));
  log.events.push_back(span_at(kTraceCompute, 150, 250));
  // An async gather in flight [100, 200), waited for in [180, 200) inside the compute span,
  // and one in flight [120, 160) on another lane, started in [100, 105) (outside compute).
  log.events.push_back(span_at(kTraceCommAsync, 100, 200, "fsdp async"));
  log.events.push_back(span_at(kTraceCommWait, 180, 200));
  log.events.push_back(span_at(kTraceCommAsync, 120, 160, "fsdp async"));
  log.events.push_back(span_at(kTraceCommWait, 100, 105));
  // Neither compute nor communication.
  log.events.push_back(span_at("data", 300, 400));
  TraceEvent counter = span_at("counter", 500, 900);
  counter.phase = 'C';
  log.events.push_back(counter);

  const TraceTotals totals = summarize_trace(log);
  EXPECT_DOUBLE_EQ(totals.window_s, 1000e-9);
  // comm = |[50,70) u [100,200)| = 120; exposed = |[50,70) u [100,105) u [180,200)| = 45;
  // compute = 200 less the 20 + 20 exposed inside it.
  EXPECT_DOUBLE_EQ(totals.comm_s, 120e-9);
  EXPECT_DOUBLE_EQ(totals.exposed_comm_s, 45e-9);
  EXPECT_DOUBLE_EQ(totals.compute_s, 160e-9);
  EXPECT_DOUBLE_EQ(totals.overlap(), 1.0 - 45.0 / 120.0);
}

TEST(TraceSummary, OverlapIsUndefinedWithoutCommunication) {
  TraceLog log;
  log.end_ns = 10;
  log.events.push_back(span_at(kTraceCompute, 0, 10));
  const TraceTotals totals = summarize_trace(log);
  EXPECT_DOUBLE_EQ(totals.compute_s, 10e-9);
  EXPECT_EQ(totals.comm_s, 0.0);
  EXPECT_EQ(totals.overlap(), -1.0);
}

}  // namespace
}  // namespace anvil
