// BlockingCommunicator (see blocking_communicator.h).
#include "comm/blocking_communicator.h"

namespace anvil {
namespace {

class FinishedHandle final : public CommHandle {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace

BlockingCommunicator::BlockingCommunicator(std::unique_ptr<Communicator> inner)
    : owned_(std::move(inner)), inner_(owned_.get()) {}

BlockingCommunicator::BlockingCommunicator(Communicator& inner) : inner_(&inner) {}

std::unique_ptr<Communicator> BlockingCommunicator::split(int color, int key) {
  return std::make_unique<BlockingCommunicator>(inner_->split(color, key));
}

std::unique_ptr<CommHandle> BlockingCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  inner_->all_reduce(t, op);
  return std::make_unique<FinishedHandle>();
}

std::unique_ptr<CommHandle> BlockingCommunicator::reduce_scatter_async(const Tensor& in,
                                                                       const Tensor& out,
                                                                       ReduceOp op) {
  inner_->reduce_scatter(in, out, op);
  return std::make_unique<FinishedHandle>();
}

std::unique_ptr<CommHandle> BlockingCommunicator::all_gather_async(const Tensor& in,
                                                                   const Tensor& out) {
  inner_->all_gather(in, out);
  return std::make_unique<FinishedHandle>();
}

}  // namespace anvil
