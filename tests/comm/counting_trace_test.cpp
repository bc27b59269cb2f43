// CountingCommunicator's traces on the single-process communicator: a blocking collective is
// one "comm" span with its operation, axis, bytes and ranks; an asynchronous one is a start
// span, a span per test/wait ("comm_wait") and an in-flight span on the axis's async track
// from its start to the wait that saw it complete; outside a window nothing is recorded and
// bytes are counted all the same.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/counting_communicator.h"
#include "core/trace.h"

namespace anvil {
namespace {

int64_t int_arg(const TraceEvent& e, const std::string& key) {
  for (const TraceArg& a : e.args)
    if (a.key == key) return std::get<int64_t>(a.value);
  ADD_FAILURE() << e.name << " has no argument " << key;
  return -1;
}

std::string string_arg(const TraceEvent& e, const std::string& key) {
  for (const TraceArg& a : e.args)
    if (a.key == key) return std::get<std::string>(a.value);
  ADD_FAILURE() << e.name << " has no argument " << key;
  return "";
}

TEST(CountingCommunicatorTrace, RecordsBlockingAndAsyncCollectives) {
  CountingCommunicator comm(make_single_process_communicator(), "fsdp");
  std::vector<float> in(8, 1.0f), out(8, 0.0f);
  const Tensor a(in.data(), DType::f32, Shape{8});
  const Tensor b(out.data(), DType::f32, Shape{8});

  TraceRecorder& recorder = TraceRecorder::instance();
  recorder.start();
  comm.all_reduce(a, ReduceOp::sum);
  auto handle = comm.all_gather_async(a, b);
  handle->wait();
  handle->wait();  // a second wait records nothing more
  const TraceLog log = recorder.stop();
  EXPECT_EQ(comm.bytes(), 64);

  ASSERT_EQ(log.events.size(), 4u);
  const TraceEvent& blocking = log.events[0];
  EXPECT_EQ(blocking.name, "all_reduce fsdp");
  EXPECT_STREQ(blocking.category, kTraceComm);
  EXPECT_EQ(string_arg(blocking, "op"), "all_reduce");
  EXPECT_EQ(string_arg(blocking, "axis"), "fsdp");
  EXPECT_EQ(int_arg(blocking, "bytes"), 32);
  EXPECT_EQ(int_arg(blocking, "ranks"), 1);
  EXPECT_EQ(int_arg(blocking, "async"), 0);

  const TraceEvent& start = log.events[1];
  const TraceEvent& wait = log.events[2];
  const TraceEvent& flight = log.events[3];
  EXPECT_EQ(start.name, "start all_gather fsdp");
  EXPECT_EQ(wait.name, "wait all_gather fsdp");
  EXPECT_STREQ(start.category, kTraceCommWait);
  EXPECT_STREQ(wait.category, kTraceCommWait);
  EXPECT_EQ(flight.name, "all_gather fsdp");
  EXPECT_STREQ(flight.category, kTraceCommAsync);
  EXPECT_EQ(flight.track, "fsdp async");
  EXPECT_EQ(int_arg(flight, "bytes"), 32);  // all_gather counts its output
  EXPECT_EQ(int_arg(flight, "async"), 1);
  EXPECT_EQ(flight.begin_ns, start.begin_ns);
  EXPECT_EQ(flight.begin_ns + flight.duration_ns, wait.begin_ns + wait.duration_ns);
}

TEST(CountingCommunicatorTrace, SplitsKeepTheAxisAndTestsEndTheFlight) {
  CountingCommunicator world(make_single_process_communicator(), "data");
  std::unique_ptr<Communicator> sub = world.split(0, 0);
  std::vector<float> values(4, 2.0f);
  const Tensor t(values.data(), DType::f32, Shape{4});
  TraceRecorder::instance().start();
  auto handle = sub->all_reduce_async(t, ReduceOp::sum);
  EXPECT_TRUE(handle->test());
  const TraceLog log = TraceRecorder::instance().stop();
  ASSERT_EQ(log.events.size(), 3u);
  EXPECT_EQ(log.events[1].name, "test all_reduce data");
  EXPECT_EQ(log.events[2].track, "data async");
  EXPECT_EQ(world.bytes(), 0);  // the sub-group counts on its own
}

TEST(CountingCommunicatorTrace, RecordsNothingOutsideAWindow) {
  CountingCommunicator comm(make_single_process_communicator(), "tp");
  std::vector<float> values(4, 2.0f);
  const Tensor t(values.data(), DType::f32, Shape{4});
  comm.all_reduce(t, ReduceOp::sum);
  auto handle = comm.all_reduce_async(t, ReduceOp::sum);
  TraceRecorder::instance().start();
  handle->wait();  // started outside the window: not traced
  const TraceLog log = TraceRecorder::instance().stop();
  EXPECT_TRUE(log.events.empty());
  EXPECT_EQ(comm.bytes(), 32);
}

}  // namespace
}  // namespace anvil
