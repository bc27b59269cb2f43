// A Communicator whose asynchronous collectives complete before they return: each runs the
// inner communicator's blocking variant and returns a finished handle. It is the switch off of
// communication overlap (parallel.overlap = false): the engine's prefetches and its gradient
// reductions then wait where they start, so a trace shows the whole communication as exposed.
// Point-to-point transfers stay asynchronous (a ring of blocking sends could deadlock).
// Results are bitwise those of the overlapped run for ordered_sum, max and the byte moves
// (communicator.h), so for the engine's exact reductions; its fast ones (ReduceOp::sum) may
// differ from the overlapped run's in the last bits.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace anvil {

class BlockingCommunicator final : public Communicator {
 public:
  // Wraps `inner` (owned).
  explicit BlockingCommunicator(std::unique_ptr<Communicator> inner);
  // Wraps a communicator owned elsewhere (the world), which must outlive this one.
  explicit BlockingCommunicator(Communicator& inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<Communicator> split(int color, int key) override;
  void all_reduce(const Tensor& t, ReduceOp op) override { inner_->all_reduce(t, op); }
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    inner_->reduce_scatter(in, out, op);
  }
  void all_gather(const Tensor& in, const Tensor& out) override { inner_->all_gather(in, out); }
  void broadcast(const Tensor& t, int root) override { inner_->broadcast(t, root); }
  void barrier() override { inner_->barrier(); }
  void send(const Tensor& t, int peer) override { inner_->send(t, peer); }
  void recv(const Tensor& t, int peer) override { inner_->recv(t, peer); }
  std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override;
  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) override {
    return inner_->send_async(t, peer);
  }
  std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) override {
    return inner_->recv_async(t, peer);
  }
  void set_staging_allocator(Allocator* allocator) override {
    inner_->set_staging_allocator(allocator);
  }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
};

}  // namespace anvil
