// The single-process communicator: rank 0 of a group of one. Reductions over one rank leave
// the data as it is; reduce_scatter and all_gather copy (the one slice is the whole tensor);
// send/recv to oneself go through a FIFO so code written for a ring of ranks also runs on one
// (recv_async takes its message from the FIFO when waited on).
// Arguments are checked exactly as the MPI communicator checks them.
#include <cstring>
#include <deque>
#include <vector>

#include "comm/comm_common.h"
#include "comm/communicator.h"

namespace anvil {
namespace {

void copy_bytes(const Tensor& from, const Tensor& to) {
  if (from.data != to.data && from.nbytes() > 0) std::memmove(to.data, from.data, from.nbytes());
}

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  std::unique_ptr<Communicator> split(int color, int /*key*/) override {
    ANVIL_CHECK(color >= 0, "[comm] split color must be >= 0, got {}", color);
    return std::make_unique<SingleProcessCommunicator>();
  }

  void all_reduce(const Tensor& t, ReduceOp /*op*/) override {
    ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[comm] all_reduce tensor has no memory");
  }

  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp /*op*/) override {
    check_reduce_scatter_args(in, out, 1);
    copy_bytes(in, out);
  }

  void all_gather(const Tensor& in, const Tensor& out) override {
    check_all_gather_args(in, out, 0, 1);
    copy_bytes(in, out);
  }

  void broadcast(const Tensor& t, int root) override {
    check_rank_arg(root, 1, "broadcast root");
    ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[comm] broadcast tensor has no memory");
  }

  void barrier() override {}

  void send(const Tensor& t, int peer) override {
    check_rank_arg(peer, 1, "send peer");
    check_host_tensor(t, "send tensor");
    const auto* bytes = static_cast<const char*>(t.data);
    pending_.push_back(Message{t.dtype, t.numel(), std::vector<char>(bytes, bytes + t.nbytes())});
  }

  void recv(const Tensor& t, int peer) override {
    check_rank_arg(peer, 1, "recv peer");
    check_host_tensor(t, "recv tensor");
    ANVIL_CHECK(!pending_.empty(),
                "[comm] recv on a single process with nothing sent: it would wait forever");
    const Message& message = pending_.front();
    ANVIL_CHECK(message.dtype == t.dtype && message.count == t.numel(),
                "[comm] recv of {} {} elements but the message holds {} {} elements", t.numel(),
                dtype_name(t.dtype), message.count, dtype_name(message.dtype));
    if (!message.bytes.empty()) std::memcpy(t.data, message.bytes.data(), message.bytes.size());
    pending_.pop_front();
  }

  std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t, ReduceOp op) override {
    all_reduce(t, op);
    return make_completed_handle();
  }

  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override {
    reduce_scatter(in, out, op);
    return make_completed_handle();
  }

  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override {
    all_gather(in, out);
    return make_completed_handle();
  }

  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) override {
    send(t, peer);
    return make_completed_handle();
  }

  // The message may be sent after this call (a ring posts its receive first), so the copy
  // out of the FIFO happens in wait().
  std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) override {
    check_rank_arg(peer, 1, "recv peer");
    check_host_tensor(t, "recv tensor");
    return std::make_unique<DeferredRecv>(*this, t);
  }

 private:
  class DeferredRecv final : public CommHandle {
   public:
    DeferredRecv(SingleProcessCommunicator& comm, const Tensor& t) : comm_(&comm), tensor_(t) {}
    void wait() override {
      if (done_) return;
      done_ = true;
      comm_->recv(tensor_, 0);
    }

   private:
    SingleProcessCommunicator* comm_;
    Tensor tensor_;
    bool done_ = false;
  };

  struct Message {
    DType dtype;
    int64_t count;
    std::vector<char> bytes;
  };
  std::deque<Message> pending_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace anvil
