// The stream communicator (see stream_communicator.h).
#include "comm/stream_communicator.h"

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace anvil {
namespace {

// The ordered sums' staging: device memory of the backend, handed to the host communicator at
// its host address (where the communication stream's host code reaches it).
class DeviceStaging final : public Allocator {
 public:
  explicit DeviceStaging(Backend& backend) : backend_(backend) {}
  Device device() const override { return {}; }

 protected:
  void* do_allocate(size_t bytes) override {
    void* device_ptr = backend_.allocate(bytes, MemoryCategory::communication);
    void* host_ptr = backend_.host_address(device_ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    device_of_[host_ptr] = device_ptr;
    return host_ptr;
  }
  void do_deallocate(void* ptr, size_t bytes) override {
    void* device_ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = device_of_.find(ptr);
      ANVIL_CHECK(it != device_of_.end(), "[comm] staging free of an unknown address");
      device_ptr = it->second;
      device_of_.erase(it);
    }
    backend_.deallocate(device_ptr, bytes, MemoryCategory::communication);
  }

 private:
  Backend& backend_;
  std::mutex mutex_;
  std::map<void*, void*> device_of_;
};

// Completion of one collective on the stream: set by the stream's task, waited by the handle.
// A point-to-point task only starts the host library's non-blocking transfer (`transfer`),
// which the handle then completes.
struct Completion {
  std::mutex mutex;
  std::condition_variable ready;
  bool done = false;
  std::exception_ptr error;
  std::unique_ptr<CommHandle> transfer;
};

class StreamHandle final : public CommHandle {
 public:
  explicit StreamHandle(std::shared_ptr<Completion> completion)
      : completion_(std::move(completion)) {}
  ~StreamHandle() override {
    // The tensors must outlive the collective (the transfer's destructor waits for it); a
    // failure nobody asked for is dropped here.
    std::unique_lock<std::mutex> lock(completion_->mutex);
    completion_->ready.wait(lock, [this] { return completion_->done; });
    completion_->transfer.reset();
  }
  void wait() override {
    std::unique_lock<std::mutex> lock(completion_->mutex);
    completion_->ready.wait(lock, [this] { return completion_->done; });
    rethrow();
    if (completion_->transfer) {
      completion_->transfer->wait();
      completion_->transfer.reset();
    }
  }
  bool test() override {
    std::lock_guard<std::mutex> lock(completion_->mutex);
    if (!completion_->done) return false;
    rethrow();
    if (completion_->transfer) {
      if (!completion_->transfer->test()) return false;
      completion_->transfer.reset();
    }
    return true;
  }

 private:
  void rethrow() {
    if (!completion_->error) return;
    std::exception_ptr error = completion_->error;
    completion_->error = nullptr;
    std::rethrow_exception(error);
  }
  std::shared_ptr<Completion> completion_;
};

class StreamCommunicator final : public Communicator {
 public:
  StreamCommunicator(std::unique_ptr<Communicator> inner, Backend& backend)
      : inner_(std::move(inner)),
        backend_(backend),
        staging_(backend),
        stream_(backend.create_stream()) {
    inner_->set_staging_allocator(&staging_);
  }
  ~StreamCommunicator() override { stream_->synchronize(); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    stream_->synchronize();  // the split runs on this thread, after every queued collective
    return std::make_unique<StreamCommunicator>(inner_->split(color, key), backend_);
  }

  void all_reduce(const Tensor& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    reduce_scatter_async(in, out, op)->wait();
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    all_gather_async(in, out)->wait();
  }
  void broadcast(const Tensor& t, int root) override {
    start([this, t = view(t), root] { inner_->broadcast(t, root); })->wait();
  }
  void barrier() override {
    start([this] { inner_->barrier(); })->wait();
  }
  void send(const Tensor& t, int peer) override { send_async(t, peer)->wait(); }
  void recv(const Tensor& t, int peer) override { recv_async(t, peer)->wait(); }

  std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t, ReduceOp op) override {
    return start([this, t = view(t), op] { inner_->all_reduce(t, op); });
  }
  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override {
    return start([this, in = view(in), out = view(out), op] {
      inner_->reduce_scatter(in, out, op);
    });
  }
  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override {
    return start([this, in = view(in), out = view(out)] { inner_->all_gather(in, out); });
  }
  // Point to point: the stream only starts the non-blocking transfer, so a ring where every
  // rank starts its send before its receive cannot block the stream; the handle completes it.
  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) override {
    return start([this, t = view(t), peer] { return inner_->send_async(t, peer); });
  }
  std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) override {
    return start([this, t = view(t), peer] { return inner_->recv_async(t, peer); });
  }
  // The staging is this communicator's own (device memory).
  void set_staging_allocator(Allocator*) override {}

 private:
  Tensor view(const Tensor& t) const { return backend_.host_view(t); }

  // Queues `collective` on the stream behind the compute work issued so far. It returns
  // nothing, or the handle of the transfer it started.
  template <typename Collective>
  std::unique_ptr<CommHandle> start(Collective collective) {
    auto completion = std::make_shared<Completion>();
    stream_->wait_event(*backend_.record_event());
    stream_->enqueue_host([collective = std::move(collective), completion]() mutable {
      std::exception_ptr error;
      std::unique_ptr<CommHandle> transfer;
      try {
        if constexpr (std::is_void_v<decltype(collective())>) {
          collective();
        } else {
          transfer = collective();
        }
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(completion->mutex);
        completion->done = true;
        completion->error = error;
        completion->transfer = std::move(transfer);
      }
      completion->ready.notify_all();
    });
    return std::make_unique<StreamHandle>(std::move(completion));
  }

  std::unique_ptr<Communicator> inner_;
  Backend& backend_;
  DeviceStaging staging_;
  std::unique_ptr<Stream> stream_;  // after staging_: drained before the staging goes
};

}  // namespace

std::unique_ptr<Communicator> make_stream_communicator(Communicator& bootstrap, Backend& backend) {
  return std::make_unique<StreamCommunicator>(bootstrap.split(0, bootstrap.rank()), backend);
}

}  // namespace anvil
