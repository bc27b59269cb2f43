// StagingCommunicator (see staging_communicator.h).
#include "comm/staging_communicator.h"

#include <vector>

namespace anvil {
namespace {

// Host staging of one tensor: a host tensor with the same dtype and shape, holding its data
// when `download` is set.
class Staged {
 public:
  Staged(Backend& backend, const Tensor& t, bool download)
      : backend_(backend), device_(t), on_device_(!t.device.is_cpu()) {
    if (!on_device_) {
      host_ = t;
      return;
    }
    bytes_.resize(t.nbytes());
    host_ = Tensor(bytes_.data(), t.dtype, t.shape);
    if (download) backend_.copy_to_host(bytes_.data(), t);
  }
  const Tensor& host() const { return host_; }
  // Copies the host result back into the device tensor.
  void upload() {
    if (on_device_) backend_.copy_from_host(device_, bytes_.data());
  }

 private:
  Backend& backend_;
  Tensor device_;
  bool on_device_;
  std::vector<uint8_t> bytes_;
  Tensor host_;
};

// The handle of an async collective on staged tensors: waiting waits for the host collective
// and then uploads the results.
class StagedHandle final : public CommHandle {
 public:
  StagedHandle(std::unique_ptr<CommHandle> inner, std::vector<std::unique_ptr<Staged>> staged,
               std::unique_ptr<Staged> result)
      : inner_(std::move(inner)), staged_(std::move(staged)), result_(std::move(result)) {}
  ~StagedHandle() override {
    if (inner_) inner_->wait();  // the host buffers must outlive the transfer
  }
  void wait() override {
    if (!inner_) return;
    inner_->wait();
    finish();
  }
  bool test() override {
    if (!inner_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    inner_.reset();
    if (result_) result_->upload();
  }
  std::unique_ptr<CommHandle> inner_;
  std::vector<std::unique_ptr<Staged>> staged_;
  std::unique_ptr<Staged> result_;
};

}  // namespace

StagingCommunicator::StagingCommunicator(std::unique_ptr<Communicator> inner, Backend& backend)
    : owned_(std::move(inner)), inner_(owned_.get()), backend_(backend) {}

StagingCommunicator::StagingCommunicator(Communicator& inner, Backend& backend)
    : inner_(&inner), backend_(backend) {}

std::unique_ptr<Communicator> StagingCommunicator::split(int color, int key) {
  return std::make_unique<StagingCommunicator>(inner_->split(color, key), backend_);
}

void StagingCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  Staged staged(backend_, t, true);
  inner_->all_reduce(staged.host(), op);
  staged.upload();
}

void StagingCommunicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  Staged staged_in(backend_, in, true), staged_out(backend_, out, false);
  inner_->reduce_scatter(staged_in.host(), staged_out.host(), op);
  staged_out.upload();
}

void StagingCommunicator::all_gather(const Tensor& in, const Tensor& out) {
  // Separate host buffers even when `in` is this rank's slice of `out`: the host collective
  // then runs out of place, which gives the same bytes.
  Staged staged_in(backend_, in, true), staged_out(backend_, out, false);
  inner_->all_gather(staged_in.host(), staged_out.host());
  staged_out.upload();
}

void StagingCommunicator::broadcast(const Tensor& t, int root) {
  Staged staged(backend_, t, rank() == root);
  inner_->broadcast(staged.host(), root);
  staged.upload();
}

void StagingCommunicator::send(const Tensor& t, int peer) {
  Staged staged(backend_, t, true);
  inner_->send(staged.host(), peer);
}

void StagingCommunicator::recv(const Tensor& t, int peer) {
  Staged staged(backend_, t, false);
  inner_->recv(staged.host(), peer);
  staged.upload();
}

std::unique_ptr<CommHandle> StagingCommunicator::all_reduce_async(const Tensor& t, ReduceOp op) {
  auto staged = std::make_unique<Staged>(backend_, t, true);
  auto inner = inner_->all_reduce_async(staged->host(), op);
  return std::make_unique<StagedHandle>(std::move(inner),
                                        std::vector<std::unique_ptr<Staged>>{},
                                        std::move(staged));
}

std::unique_ptr<CommHandle> StagingCommunicator::reduce_scatter_async(const Tensor& in,
                                                                      const Tensor& out,
                                                                      ReduceOp op) {
  std::vector<std::unique_ptr<Staged>> inputs;
  inputs.push_back(std::make_unique<Staged>(backend_, in, true));
  auto result = std::make_unique<Staged>(backend_, out, false);
  auto inner = inner_->reduce_scatter_async(inputs[0]->host(), result->host(), op);
  return std::make_unique<StagedHandle>(std::move(inner), std::move(inputs), std::move(result));
}

std::unique_ptr<CommHandle> StagingCommunicator::all_gather_async(const Tensor& in,
                                                                  const Tensor& out) {
  std::vector<std::unique_ptr<Staged>> inputs;
  inputs.push_back(std::make_unique<Staged>(backend_, in, true));
  auto result = std::make_unique<Staged>(backend_, out, false);
  auto inner = inner_->all_gather_async(inputs[0]->host(), result->host());
  return std::make_unique<StagedHandle>(std::move(inner), std::move(inputs), std::move(result));
}

std::unique_ptr<CommHandle> StagingCommunicator::send_async(const Tensor& t, int peer) {
  std::vector<std::unique_ptr<Staged>> inputs;
  inputs.push_back(std::make_unique<Staged>(backend_, t, true));
  auto inner = inner_->send_async(inputs[0]->host(), peer);
  return std::make_unique<StagedHandle>(std::move(inner), std::move(inputs), nullptr);
}

std::unique_ptr<CommHandle> StagingCommunicator::recv_async(const Tensor& t, int peer) {
  auto result = std::make_unique<Staged>(backend_, t, false);
  auto inner = inner_->recv_async(result->host(), peer);
  return std::make_unique<StagedHandle>(std::move(inner),
                                        std::vector<std::unique_ptr<Staged>>{},
                                        std::move(result));
}

}  // namespace anvil
