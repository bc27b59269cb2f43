// Collectives over NCCL for tensors on one CUDA device per rank. Each communicator owns a CUDA
// stream: a collective first makes that stream wait (on the device, through an event) for the
// producer stream's queued work, enqueues the NCCL call, and either synchronises (blocking
// variants) or returns a handle holding an event (async variants). Plain f32/i32/u32 sums run
// as one NCCL call. Rank-order sums, max and 16-bit sums move every rank's contribution with
// NCCL (all_gather, or grouped send/recv for reduce_scatter) into device scratch, then reduce
// on the host with comm/reduce_kernels.h, so their bits equal the MPI communicator's; they are
// meant for small tensors (norms, flags, metrics), not for gradient buckets. On one rank every
// reduction is the identity and runs as at most one device copy.
// Host tensors (the trainer's flags, counts and memory figures, exchanged over the same world
// as the device tensors) travel through device scratch, blocking whatever the call.
// send_async/recv_async (ring attention's exchanges) queue nothing at first: NCCL pairs a send
// with its receive only inside one group, so the pending calls are issued together, as one
// ncclGroupStart/End, when the first of their handles is waited on or tested.
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "comm/comm_common.h"
#include "comm/device_communicator.h"
#include "comm/nccl/nccl_runtime.h"
#include "comm/reduce_kernels.h"
#include "comm/watchdog.h"
#include "core/error.h"

namespace anvil::nccl {
namespace {

// Device memory freed on destruction.
struct DeviceScratch {
  void* data = nullptr;
  explicit DeviceScratch(size_t bytes) {
    if (bytes > 0) NCCL_CUDA_CHECK(cudaMalloc(&data, bytes));
  }
  ~DeviceScratch() {
    if (data != nullptr) cudaFree(data);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

// A device copy of a host tensor for one staged collective, made and read back on `stream`.
class StagedTensor {
 public:
  StagedTensor(const Tensor& host, int device, cudaStream_t stream, bool upload)
      : host_(host), device_(device), stream_(stream), scratch_(host.nbytes()) {
    if (upload && host.nbytes() > 0) {
      NCCL_CUDA_CHECK(cudaMemcpyAsync(scratch_.data, host.data, host.nbytes(),
                                      cudaMemcpyHostToDevice, stream_));
    }
  }
  Tensor tensor() const {
    return Tensor(scratch_.data, host_.dtype, host_.shape, Device{DeviceType::cuda, device_});
  }
  // Copies the device values back into the host tensor (waits for the stream).
  void download() {
    if (host_.nbytes() > 0) {
      NCCL_CUDA_CHECK(cudaMemcpyAsync(host_.data, scratch_.data, host_.nbytes(),
                                      cudaMemcpyDeviceToHost, stream_));
    }
    NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  Tensor host_;
  int device_;
  cudaStream_t stream_;
  DeviceScratch scratch_;
};

// A collective queued on the communicator's stream; `finish` (may be empty) runs on the host
// once the device work is done, exactly once.
class NcclHandle final : public CommHandle {
 public:
  NcclHandle(cudaStream_t stream, int device, std::unique_ptr<DeviceScratch> scratch,
             std::function<void()> finish, const char* name)
      : device_(device), name_(name), scratch_(std::move(scratch)), finish_(std::move(finish)) {
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    NCCL_CUDA_CHECK(cudaEventRecord(done_, stream));
  }
  ~NcclHandle() override {
    if (!finished_) {
      const CollectiveScope scope(name_);
      cudaSetDevice(device_);
      cudaEventSynchronize(done_);
    }
    cudaEventDestroy(done_);
  }

  void wait() override {
    if (finished_) return;
    const CollectiveScope scope(name_);
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    NCCL_CUDA_CHECK(cudaEventSynchronize(done_));
    complete();
  }

  bool test() override {
    if (finished_) return true;
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    NCCL_CUDA_CHECK(status);
    complete();
    return true;
  }

 private:
  void complete() {
    finished_ = true;
    if (finish_) finish_();
    scratch_.reset();
  }

  int device_;
  const char* name_;  // what the collective watchdog reports while wait() blocks
  cudaEvent_t done_ = nullptr;
  std::unique_ptr<DeviceScratch> scratch_;
  std::function<void()> finish_;
  bool finished_ = false;
};

// The sends and receives queued since the last issue; NCCL runs them as one group.
struct PointToPointGroup {
  struct Transfer {
    bool send = true;
    Tensor tensor;
    int peer = 0;
    cudaEvent_t ready = nullptr;  // the producer stream's work queued before the call
  };
  std::vector<Transfer> transfers;
  cudaEvent_t done = nullptr;
  bool issued = false;

  PointToPointGroup() = default;
  PointToPointGroup(const PointToPointGroup&) = delete;
  PointToPointGroup& operator=(const PointToPointGroup&) = delete;
  ~PointToPointGroup() {
    for (const Transfer& transfer : transfers) cudaEventDestroy(transfer.ready);
    if (done != nullptr) cudaEventDestroy(done);
  }
};

// One queued send or receive. Waiting on (or testing) any handle of a group first issues the
// whole group through `issue`, so a ring's paired send and receive meet inside one NCCL group.
class PointToPointHandle final : public CommHandle {
 public:
  PointToPointHandle(std::shared_ptr<PointToPointGroup> group, std::function<void()> issue,
                     int device, const char* name)
      : group_(std::move(group)), issue_(std::move(issue)), device_(device), name_(name) {}
  ~PointToPointHandle() override {
    // An unwaited handle of a group never issued stays queued: the communicator issues it at
    // its next call or when it is destroyed, so the peer's matching call is not left hanging.
    if (!finished_ && group_->issued) {
      const CollectiveScope scope(name_);
      cudaSetDevice(device_);
      cudaEventSynchronize(group_->done);
    }
  }

  void wait() override {
    if (finished_) return;
    const CollectiveScope scope(name_);
    issue_if_pending();
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    NCCL_CUDA_CHECK(cudaEventSynchronize(group_->done));
    finished_ = true;
  }

  bool test() override {
    if (finished_) return true;
    issue_if_pending();
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    const cudaError_t status = cudaEventQuery(group_->done);
    if (status == cudaErrorNotReady) return false;
    NCCL_CUDA_CHECK(status);
    finished_ = true;
    return true;
  }

 private:
  void issue_if_pending() {
    if (!group_->issued) issue_();
  }

  std::shared_ptr<PointToPointGroup> group_;
  std::function<void()> issue_;
  int device_;
  const char* name_;
  bool finished_ = false;
};

// Returns whether the byte ranges of two tensors overlap.
bool overlaps(const Tensor& a, const Tensor& b) {
  const char* a_begin = static_cast<const char*>(a.data);
  const char* b_begin = static_cast<const char*>(b.data);
  return a.numel() > 0 && b.numel() > 0 && a_begin < b_begin + b.nbytes() &&
         b_begin < a_begin + a.nbytes();
}

// Reduces `ranks` contiguous rows of `count` elements (host memory) into `out` in rank order.
void reduce_rows_on_host(const std::vector<uint8_t>& rows, int ranks, int64_t count, DType dtype,
                         ReduceOp op, void* out) {
  if (op == ReduceOp::max) {
    const size_t row_bytes = static_cast<size_t>(count) * dtype_size(dtype);
    std::memcpy(out, rows.data(), row_bytes);
    for (int r = 1; r < ranks; ++r) max_into(rows.data() + r * row_bytes, out, count, dtype);
    return;
  }
  sum_in_rank_order(rows.data(), ranks, count, dtype, out);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, cudaStream_t producer)
      : comm_(comm), device_(device), producer_(producer) {
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    NCCL_CHECK(ncclCommCount(comm_, &size_));
    NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&producer_ready_, cudaEventDisableTiming));
    NCCL_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(float)));
  }

  ~NcclCommunicator() override {
    try {
      issue_pending_transfers();
    } catch (const std::exception&) {
      // Destruction must not throw; a failed issue leaves nothing queued to wait for.
    }
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaFree(barrier_word_);
    cudaEventDestroy(producer_ready_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ANVIL_CHECK(color >= 0, "[comm] split color must be >= 0, got {}", color);
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    ncclComm_t sub = nullptr;
    {
      const CollectiveScope scope("split");
      NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
    }
    return std::make_unique<NcclCommunicator>(sub, device_, producer_);
  }

  // The outer scope names the blocking call; the handle's own scope nests inside it.
  void all_reduce(const Tensor& t, ReduceOp op) override {
    const CollectiveScope scope("all_reduce");
    all_reduce_async(t, op)->wait();
  }
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    const CollectiveScope scope("reduce_scatter");
    reduce_scatter_async(in, out, op)->wait();
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    const CollectiveScope scope("all_gather");
    all_gather_async(in, out)->wait();
  }

  void broadcast(const Tensor& t, int root) override {
    check_rank_arg(root, size_, "broadcast root");
    if (t.device.is_cpu()) {
      StagedTensor staged(t, device_, stream_, /*upload=*/true);
      broadcast(staged.tensor(), root);
      staged.download();
      return;
    }
    check_device_tensor(t, "broadcast tensor");
    if (t.numel() == 0) return;
    begin();
    NCCL_CHECK(ncclBroadcast(t.data, t.data, t.nbytes(), ncclUint8, root, comm_, stream_));
    synchronize("broadcast");
  }

  void barrier() override {
    begin();
    NCCL_CHECK(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_,
                             stream_));
    synchronize("barrier");
  }

  void send(const Tensor& t, int peer) override {
    check_rank_arg(peer, size_, "peer");
    if (t.device.is_cpu()) {
      StagedTensor staged(t, device_, stream_, /*upload=*/true);
      send(staged.tensor(), peer);
      return;
    }
    check_device_tensor(t, "send tensor");
    if (t.numel() == 0) return;
    begin();
    NCCL_CHECK(ncclSend(t.data, t.nbytes(), ncclUint8, peer, comm_, stream_));
    synchronize("send");
  }

  void recv(const Tensor& t, int peer) override {
    check_rank_arg(peer, size_, "peer");
    if (t.device.is_cpu()) {
      StagedTensor staged(t, device_, stream_, /*upload=*/false);
      recv(staged.tensor(), peer);
      staged.download();
      return;
    }
    check_device_tensor(t, "recv tensor");
    if (t.numel() == 0) return;
    begin();
    NCCL_CHECK(ncclRecv(t.data, t.nbytes(), ncclUint8, peer, comm_, stream_));
    synchronize("recv");
  }

  // Separate ncclSend and ncclRecv calls queued on one stream deadlock in a ring (every rank's
  // send waits for a receive queued behind it): they are queued here and issued as one group.
  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) override {
    return queue_transfer(/*send=*/true, t, peer);
  }
  std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) override {
    return queue_transfer(/*send=*/false, t, peer);
  }

  std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t, ReduceOp op) override {
    if (t.device.is_cpu()) {
      StagedTensor staged(t, device_, stream_, /*upload=*/true);
      all_reduce_async(staged.tensor(), op)->wait();
      staged.download();
      return make_completed_handle();
    }
    check_device_tensor(t, "all_reduce tensor");
    if (t.numel() == 0 || (size_ == 1 && op != ReduceOp::max)) return make_completed_handle();
    begin();
    if (runs_on_nccl(op, t.dtype)) {
      NCCL_CHECK(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()),
                               datatype_of(t.dtype), ncclSum, comm_, stream_));
      return handle(nullptr, {}, "all_reduce_async");
    }
    auto scratch = std::make_unique<DeviceScratch>(t.nbytes() * size_);
    NCCL_CHECK(ncclAllGather(t.data, scratch->data, t.nbytes(), ncclUint8, comm_, stream_));
    return reduce_on_host_after(std::move(scratch), t, op, "all_reduce_async");
  }

  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override {
    if (in.device.is_cpu() && out.device.is_cpu()) {
      StagedTensor staged_in(in, device_, stream_, /*upload=*/true);
      StagedTensor staged_out(out, device_, stream_, /*upload=*/false);
      reduce_scatter_async(staged_in.tensor(), staged_out.tensor(), op)->wait();
      staged_out.download();
      return make_completed_handle();
    }
    check_device_tensor(in, "reduce_scatter input");
    check_device_tensor(out, "reduce_scatter output");
    ANVIL_CHECK(in.dtype == out.dtype, "[comm] reduce_scatter input is {} but output is {}",
                dtype_name(in.dtype), dtype_name(out.dtype));
    ANVIL_CHECK(in.numel() == out.numel() * size_,
                "[comm] reduce_scatter over {} ranks needs an input of {} x {} elements, got {}",
                size_, size_, out.numel(), in.numel());
    ANVIL_CHECK(!overlaps(in, out), "[comm] reduce_scatter input and output overlap");
    if (out.numel() == 0) return make_completed_handle();
    begin();
    if (size_ == 1 && op != ReduceOp::max) {  // one rank's sum is its own values
      NCCL_CUDA_CHECK(
          cudaMemcpyAsync(out.data, in.data, out.nbytes(), cudaMemcpyDeviceToDevice, stream_));
      return handle(nullptr, {}, "reduce_scatter_async");
    }
    if (runs_on_nccl(op, in.dtype)) {
      NCCL_CHECK(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()),
                                   datatype_of(in.dtype), ncclSum, comm_, stream_));
      return handle(nullptr, {}, "reduce_scatter_async");
    }
    // Rank r collects every rank's slice r (an all-to-all), then reduces on the host.
    const size_t slice = out.nbytes();
    auto scratch = std::make_unique<DeviceScratch>(slice * size_);
    NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      NCCL_CHECK(ncclSend(static_cast<const char*>(in.data) + peer * slice, slice, ncclUint8,
                          peer, comm_, stream_));
      NCCL_CHECK(ncclRecv(static_cast<char*>(scratch->data) + peer * slice, slice, ncclUint8,
                          peer, comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
    return reduce_on_host_after(std::move(scratch), out, op, "reduce_scatter_async");
  }

  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override {
    if (in.device.is_cpu() && out.device.is_cpu()) {
      // The output is uploaded too, so that an in-place input keeps its place inside it.
      StagedTensor staged_out(out, device_, stream_, /*upload=*/overlaps(in, out));
      std::unique_ptr<StagedTensor> staged_in;
      Tensor device_in;
      if (overlaps(in, out)) {
        const auto offset = static_cast<const char*>(in.data) - static_cast<const char*>(out.data);
        device_in = Tensor(static_cast<char*>(staged_out.tensor().data) + offset, in.dtype,
                           in.shape, staged_out.tensor().device);
      } else {
        staged_in = std::make_unique<StagedTensor>(in, device_, stream_, /*upload=*/true);
        device_in = staged_in->tensor();
      }
      all_gather_async(device_in, staged_out.tensor())->wait();
      staged_out.download();
      return make_completed_handle();
    }
    check_device_tensor(in, "all_gather input");
    check_device_tensor(out, "all_gather output");
    ANVIL_CHECK(in.dtype == out.dtype, "[comm] all_gather input is {} but output is {}",
                dtype_name(in.dtype), dtype_name(out.dtype));
    ANVIL_CHECK(out.numel() == in.numel() * size_,
                "[comm] all_gather over {} ranks needs an output of {} x {} elements, got {}",
                size_, size_, in.numel(), out.numel());
    ANVIL_CHECK(!overlaps(in, out) || all_gather_is_in_place(in, out, rank_),
                "[comm] all_gather input overlaps the output but is not rank {}'s slice of it",
                rank_);
    if (in.numel() == 0) return make_completed_handle();
    begin();
    // NCCL's in-place form is exactly sendbuff == recvbuff + rank * count.
    NCCL_CHECK(ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, stream_));
    return handle(nullptr, {}, "all_gather_async");
  }

 private:
  void check_device_tensor(const Tensor& t, const char* what) const {
    ANVIL_CHECK(t.device.type == DeviceType::cuda && t.device.index == device_,
                "[comm] {} must be on cuda:{} for this NCCL communicator", what, device_);
    ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[comm] {} has {} elements but no memory",
                what, t.numel());
  }

  // Blocks until the communicator's stream is idle, timed by the watchdog as `collective`.
  void synchronize(const char* collective) {
    const CollectiveScope scope(collective);
    NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::unique_ptr<CommHandle> queue_transfer(bool send, const Tensor& t, int peer) {
    check_rank_arg(peer, size_, "peer");
    check_device_tensor(t, send ? "send_async tensor" : "recv_async tensor");
    if (t.numel() == 0) return make_completed_handle();
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    if (!pending_) pending_ = std::make_shared<PointToPointGroup>();
    PointToPointGroup::Transfer transfer{send, t, peer, nullptr};
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&transfer.ready, cudaEventDisableTiming));
    pending_->transfers.push_back(transfer);
    NCCL_CUDA_CHECK(cudaEventRecord(transfer.ready, producer_));
    return std::make_unique<PointToPointHandle>(
        pending_, [this] { issue_pending_transfers(); }, device_,
        send ? "send_async" : "recv_async");
  }

  // Issues the queued sends and receives as one NCCL group, each after the producer's work
  // that was queued before its call.
  void issue_pending_transfers() {
    if (!pending_) return;
    const std::shared_ptr<PointToPointGroup> group = std::move(pending_);
    pending_.reset();
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    for (const auto& transfer : group->transfers) {
      NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, transfer.ready, 0));
    }
    NCCL_CHECK(ncclGroupStart());
    for (const auto& transfer : group->transfers) {
      const Tensor& t = transfer.tensor;
      if (transfer.send) {
        NCCL_CHECK(ncclSend(t.data, t.nbytes(), ncclUint8, transfer.peer, comm_, stream_));
      } else {
        NCCL_CHECK(ncclRecv(t.data, t.nbytes(), ncclUint8, transfer.peer, comm_, stream_));
      }
    }
    NCCL_CHECK(ncclGroupEnd());
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&group->done, cudaEventDisableTiming));
    NCCL_CUDA_CHECK(cudaEventRecord(group->done, stream_));
    group->issued = true;
  }

  // Selects the device and makes the communicator's stream wait for the producer's work (after
  // issuing any queued sends and receives, which keep their place in the call order).
  void begin() {
    issue_pending_transfers();
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    NCCL_CUDA_CHECK(cudaEventRecord(producer_ready_, producer_));
    NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_ready_, 0));
  }

  std::unique_ptr<CommHandle> handle(std::unique_ptr<DeviceScratch> scratch,
                                     std::function<void()> finish, const char* name) {
    return std::make_unique<NcclHandle>(stream_, device_, std::move(scratch), std::move(finish),
                                        name);
  }

  // Returns a handle that, once `scratch` holds every rank's contribution (size rows of
  // result.numel() elements), reduces them in rank order on the host into `result`.
  std::unique_ptr<CommHandle> reduce_on_host_after(std::unique_ptr<DeviceScratch> scratch,
                                                   const Tensor& result, ReduceOp op,
                                                   const char* name) {
    const void* rows_on_device = scratch->data;
    const int ranks = size_;
    const int device = device_;
    auto finish = [rows_on_device, ranks, device, result, op] {
      std::vector<uint8_t> rows(result.nbytes() * ranks);
      std::vector<uint8_t> reduced(result.nbytes());
      NCCL_CUDA_CHECK(cudaSetDevice(device));
      NCCL_CUDA_CHECK(cudaMemcpy(rows.data(), rows_on_device, rows.size(), cudaMemcpyDeviceToHost));
      reduce_rows_on_host(rows, ranks, result.numel(), result.dtype, op, reduced.data());
      NCCL_CUDA_CHECK(
          cudaMemcpy(result.data, reduced.data(), reduced.size(), cudaMemcpyHostToDevice));
    };
    return handle(std::move(scratch), std::move(finish), name);
  }

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  cudaStream_t producer_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_ready_ = nullptr;
  float* barrier_word_ = nullptr;
  std::shared_ptr<PointToPointGroup> pending_;  // send_async/recv_async calls not yet issued
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace
}  // namespace anvil::nccl

namespace anvil {

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     void* producer_stream) {
  using namespace nccl;
  int device_count = 0;
  NCCL_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  ANVIL_CHECK(device >= 0 && device < device_count,
              "[nccl] device {} does not exist ({} CUDA devices)", device, device_count);
  NCCL_CUDA_CHECK(cudaSetDevice(device));
  // Rank 0's id and the status of creating it travel together, so that every rank fails
  // with the same message instead of waiting on a rank that gave up.
  static_assert(sizeof(ncclUniqueId) % sizeof(uint32_t) == 0, "the id travels as u32 words");
  constexpr size_t kIdWords = sizeof(ncclUniqueId) / sizeof(uint32_t);
  std::vector<uint32_t> message(kIdWords + 1, 0);
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    message[kIdWords] = static_cast<uint32_t>(result);
    std::memcpy(message.data(), &id, sizeof(id));
  }
  bootstrap.broadcast(Tensor(message.data(), DType::u32, Shape{static_cast<int64_t>(message.size())}),
                      0);
  check_nccl(static_cast<ncclResult_t>(message[kIdWords]), "ncclGetUniqueId (on rank 0)",
             __FILE__, __LINE__);
  std::memcpy(&id, message.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  {
    const CollectiveScope scope("ncclCommInitRank");
    NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  }
  return std::make_unique<NcclCommunicator>(comm, device,
                                            static_cast<cudaStream_t>(producer_stream));
}

}  // namespace anvil
