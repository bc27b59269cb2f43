// A Communicator for tensors in device memory the host collective library cannot read (the
// simulated device; any accelerator without its own collective library yet): each collective
// copies the device tensors to host staging through the backend, runs the host communicator's
// collective, and copies the results back. Host tensors pass straight through. The async
// variants download at the start and upload when their handle's wait() or test() sees the
// host collective complete, so a ring of sends and receives still progresses. A port
// with a device collective library (NCCL, RCCL, HCCL) replaces this with its own communicator.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace anvil {

class StagingCommunicator final : public Communicator {
 public:
  // Wraps `inner` (owned) for tensors of `backend`, which must outlive this communicator.
  StagingCommunicator(std::unique_ptr<Communicator> inner, Backend& backend);
  // Wraps a communicator owned elsewhere (the world), which must outlive this one.
  StagingCommunicator(Communicator& inner, Backend& backend);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<Communicator> split(int color, int key) override;
  void all_reduce(const Tensor& t, ReduceOp op) override;
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void broadcast(const Tensor& t, int root) override;
  void barrier() override { inner_->barrier(); }
  void send(const Tensor& t, int peer) override;
  void recv(const Tensor& t, int peer) override;
  std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t, ReduceOp op) override;
  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override;
  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override;
  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) override;
  std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) override;

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  Backend& backend_;
};

}  // namespace anvil
