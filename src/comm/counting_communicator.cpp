// CountingCommunicator: count, then forward (see counting_communicator.h).
#include "comm/counting_communicator.h"

namespace anvil {

CountingCommunicator::CountingCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)) {}

std::unique_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  return std::make_unique<CountingCommunicator>(inner_->split(color, key));
}

void CountingCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  count(t);
  inner_->all_reduce(t, op);
}

void CountingCommunicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  count(in);
  inner_->reduce_scatter(in, out, op);
}

void CountingCommunicator::all_gather(const Tensor& in, const Tensor& out) {
  count(out);
  inner_->all_gather(in, out);
}

void CountingCommunicator::broadcast(const Tensor& t, int root) {
  count(t);
  inner_->broadcast(t, root);
}

void CountingCommunicator::send(const Tensor& t, int peer) {
  count(t);
  inner_->send(t, peer);
}

void CountingCommunicator::recv(const Tensor& t, int peer) {
  count(t);
  inner_->recv(t, peer);
}

std::unique_ptr<CommHandle> CountingCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  count(t);
  return inner_->all_reduce_async(t, op);
}

std::unique_ptr<CommHandle> CountingCommunicator::reduce_scatter_async(const Tensor& in,
                                                                      const Tensor& out,
                                                                      ReduceOp op) {
  count(in);
  return inner_->reduce_scatter_async(in, out, op);
}

std::unique_ptr<CommHandle> CountingCommunicator::all_gather_async(const Tensor& in,
                                                                  const Tensor& out) {
  count(out);
  return inner_->all_gather_async(in, out);
}

std::unique_ptr<CommHandle> CountingCommunicator::send_async(const Tensor& t, int peer) {
  count(t);
  return inner_->send_async(t, peer);
}

std::unique_ptr<CommHandle> CountingCommunicator::recv_async(const Tensor& t, int peer) {
  count(t);
  return inner_->recv_async(t, peer);
}

}  // namespace anvil
