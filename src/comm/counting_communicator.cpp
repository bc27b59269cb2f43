// CountingCommunicator: count, trace, then forward (see counting_communicator.h).
#include "comm/counting_communicator.h"

#include <fmt/format.h>

#include "core/trace.h"

namespace anvil {
namespace {

// What a traced collective is: the arguments every one of its spans carries.
struct CollectiveInfo {
  const char* op;
  std::string axis;
  int64_t bytes;
  int ranks;
};

void add_collective_args(TraceEvent& event, const CollectiveInfo& info, bool async) {
  event.args.push_back(TraceArg{"op", std::string(info.op)});
  event.args.push_back(TraceArg{"axis", info.axis});
  event.args.push_back(TraceArg{"bytes", info.bytes});
  event.args.push_back(TraceArg{"ranks", int64_t{info.ranks}});
  event.args.push_back(TraceArg{"async", int64_t{async ? 1 : 0}});
}

// Records a span of `info` on the calling thread: "<what> <op> <axis>" (what may be empty).
void record_span(uint64_t session, const char* category, std::string_view what,
                 const CollectiveInfo& info, int64_t begin_ns, int64_t end_ns, bool async) {
  TraceEvent event;
  event.name = what.empty() ? fmt::format("{} {}", info.op, info.axis)
                            : fmt::format("{} {} {}", what, info.op, info.axis);
  event.category = category;
  event.begin_ns = begin_ns;
  event.duration_ns = end_ns - begin_ns;
  event.thread = TraceRecorder::thread_id();
  add_collective_args(event, info, async);
  TraceRecorder::instance().add(session, std::move(event));
}

// A blocking collective's span, from construction to destruction.
class BlockingSpan {
 public:
  BlockingSpan(const char* op, const CountingCommunicator& comm, int64_t bytes)
      : session_(TraceRecorder::instance().session()) {
    if (session_ == 0) return;
    info_ = CollectiveInfo{op, comm.axis(), bytes, comm.size()};
    begin_ns_ = TraceRecorder::now_ns();
  }
  ~BlockingSpan() {
    if (session_ != 0)
      record_span(session_, kTraceComm, "", info_, begin_ns_, TraceRecorder::now_ns(), false);
  }
  BlockingSpan(const BlockingSpan&) = delete;
  BlockingSpan& operator=(const BlockingSpan&) = delete;

 private:
  uint64_t session_;
  CollectiveInfo info_{};
  int64_t begin_ns_ = 0;
};

// An async collective's handle while traced: each test() and wait() is a blocked span, and the
// first one that sees completion (or destruction, which waits) ends the in-flight span.
class TracedHandle final : public CommHandle {
 public:
  TracedHandle(std::unique_ptr<CommHandle> inner, uint64_t session, CollectiveInfo info,
               int64_t started_ns)
      : inner_(std::move(inner)), session_(session), info_(std::move(info)),
        started_ns_(started_ns) {}
  ~TracedHandle() override {
    if (done_) return;
    const int64_t begin = TraceRecorder::now_ns();
    inner_.reset();  // waits
    complete("wait", begin);
  }

  void wait() override {
    if (done_) return inner_->wait();
    const int64_t begin = TraceRecorder::now_ns();
    inner_->wait();
    complete("wait", begin);
  }

  bool test() override {
    if (done_) return inner_->test();
    const int64_t begin = TraceRecorder::now_ns();
    if (inner_->test()) {
      complete("test", begin);
      return true;
    }
    record_span(session_, kTraceCommWait, "test", info_, begin, TraceRecorder::now_ns(), true);
    return false;
  }

 private:
  void complete(const char* what, int64_t begin_ns) {
    const int64_t end = TraceRecorder::now_ns();
    done_ = true;
    record_span(session_, kTraceCommWait, what, info_, begin_ns, end, true);
    TraceEvent flight;
    flight.name = fmt::format("{} {}", info_.op, info_.axis);
    flight.category = kTraceCommAsync;
    flight.begin_ns = started_ns_;
    flight.duration_ns = end - started_ns_;
    flight.thread = TraceRecorder::thread_id();
    flight.track = info_.axis + " async";
    add_collective_args(flight, info_, true);
    TraceRecorder::instance().add(session_, std::move(flight));
  }

  std::unique_ptr<CommHandle> inner_;
  uint64_t session_;
  CollectiveInfo info_;
  int64_t started_ns_;
  bool done_ = false;
};

}  // namespace

CountingCommunicator::CountingCommunicator(std::unique_ptr<Communicator> inner, std::string axis)
    : owned_(std::move(inner)), inner_(owned_.get()), axis_(std::move(axis)) {}

CountingCommunicator::CountingCommunicator(Communicator& inner, std::string axis)
    : inner_(&inner), axis_(std::move(axis)) {}

std::unique_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  return std::make_unique<CountingCommunicator>(inner_->split(color, key), axis_);
}

template <typename Start>
std::unique_ptr<CommHandle> CountingCommunicator::start_async(const char* op,
                                                              const Tensor& counted,
                                                              Start&& start) {
  count(counted);
  const uint64_t session = TraceRecorder::instance().session();
  if (session == 0) return start();
  CollectiveInfo info{op, axis_, static_cast<int64_t>(counted.nbytes()), size()};
  const int64_t started = TraceRecorder::now_ns();
  std::unique_ptr<CommHandle> handle = start();
  record_span(session, kTraceCommWait, "start", info, started, TraceRecorder::now_ns(), true);
  return std::make_unique<TracedHandle>(std::move(handle), session, std::move(info), started);
}

void CountingCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  count(t);
  BlockingSpan span("all_reduce", *this, static_cast<int64_t>(t.nbytes()));
  inner_->all_reduce(t, op);
}

void CountingCommunicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  count(in);
  BlockingSpan span("reduce_scatter", *this, static_cast<int64_t>(in.nbytes()));
  inner_->reduce_scatter(in, out, op);
}

void CountingCommunicator::all_gather(const Tensor& in, const Tensor& out) {
  count(out);
  BlockingSpan span("all_gather", *this, static_cast<int64_t>(out.nbytes()));
  inner_->all_gather(in, out);
}

void CountingCommunicator::broadcast(const Tensor& t, int root) {
  count(t);
  BlockingSpan span("broadcast", *this, static_cast<int64_t>(t.nbytes()));
  inner_->broadcast(t, root);
}

void CountingCommunicator::barrier() {
  BlockingSpan span("barrier", *this, 0);
  inner_->barrier();
}

void CountingCommunicator::send(const Tensor& t, int peer) {
  count(t);
  BlockingSpan span("send", *this, static_cast<int64_t>(t.nbytes()));
  inner_->send(t, peer);
}

void CountingCommunicator::recv(const Tensor& t, int peer) {
  count(t);
  BlockingSpan span("recv", *this, static_cast<int64_t>(t.nbytes()));
  inner_->recv(t, peer);
}

std::unique_ptr<CommHandle> CountingCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  return start_async("all_reduce", t, [&] { return inner_->all_reduce_async(t, op); });
}

std::unique_ptr<CommHandle> CountingCommunicator::reduce_scatter_async(const Tensor& in,
                                                                      const Tensor& out,
                                                                      ReduceOp op) {
  return start_async("reduce_scatter", in,
                     [&] { return inner_->reduce_scatter_async(in, out, op); });
}

std::unique_ptr<CommHandle> CountingCommunicator::all_gather_async(const Tensor& in,
                                                                  const Tensor& out) {
  return start_async("all_gather", out, [&] { return inner_->all_gather_async(in, out); });
}

std::unique_ptr<CommHandle> CountingCommunicator::send_async(const Tensor& t, int peer) {
  return start_async("send", t, [&] { return inner_->send_async(t, peer); });
}

std::unique_ptr<CommHandle> CountingCommunicator::recv_async(const Tensor& t, int peer) {
  return start_async("recv", t, [&] { return inner_->recv_async(t, peer); });
}

}  // namespace anvil
