// A Communicator that counts the payload bytes this rank hands to each collective and then
// forwards the call unchanged: all_reduce and broadcast count the tensor, reduce_scatter its
// input, all_gather its output, send and recv (blocking or async) their tensor. These are the
// sizes a communication-volume formula speaks of (what a ring algorithm puts on the wire per
// rank is 2(p-1)/p of an all-reduce's payload and (p-1)/p of the others'). The parallel layer
// wraps each mesh axis in one, so a run can report the bytes per step of every axis.
// While a trace window is open (core/trace.h) it also records every collective with its
// operation, axis name, bytes and ranks: a blocking one as a "comm" span; an asynchronous one
// as a "start" span, a span per test() or wait() of its handle ("comm_wait": the caller is
// blocked) and a "comm_async" span on the track "<axis> async" from its start to the moment
// its completion was seen. Outside a window the handles are the inner communicator's own.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace anvil {

class CountingCommunicator final : public Communicator {
 public:
  // Wraps `inner`, naming its collectives in traces after `axis` ("fsdp").
  CountingCommunicator(std::unique_ptr<Communicator> inner, std::string axis);
  // Wraps a communicator owned elsewhere (the world), which must outlive this one.
  CountingCommunicator(Communicator& inner, std::string axis);

  // Returns the payload bytes counted since construction.
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  const std::string& axis() const { return axis_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  // Returns the sub-group, counted separately under the same axis name.
  std::unique_ptr<Communicator> split(int color, int key) override;
  void all_reduce(const Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void broadcast(const Tensor& t, int root) override;
  void barrier() override;
  void send(const Tensor& t, int peer) override;
  void recv(const Tensor& t, int peer) override;
  std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override;
  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) override;
  std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) override;
  void set_staging_allocator(Allocator* allocator) override {
    inner_->set_staging_allocator(allocator);
  }

 private:
  void count(const Tensor& t) {
    bytes_.fetch_add(static_cast<int64_t>(t.nbytes()), std::memory_order_relaxed);
  }
  // Starts an async collective through `start` and returns its handle, traced when a window
  // is open.
  template <typename Start>
  std::unique_ptr<CommHandle> start_async(const char* op, const Tensor& counted, Start&& start);

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  std::string axis_;
  std::atomic<int64_t> bytes_{0};
};

}  // namespace anvil
