// Collectives over NCCL for tensors on one CUDA device per rank. Each communicator owns a CUDA
// stream: a collective first makes that stream wait (on the device, through an event) for the
// producer stream's queued work, enqueues the NCCL call, and either synchronises (blocking
// variants) or returns a handle holding an event (async variants). Plain f32/i32/u32 sums run
// as one NCCL call. Rank-order sums, max and 16-bit sums (the engine's exact gradient
// reductions) never leave the device: reduce_scatter is a chunked all-to-all of grouped
// send/recv (comm/exchange_schedule.h) whose received rows, with the rank's own piece read in
// place, the kernels of rank_order_reduce.h add in rank order straight into the output, so the
// bits equal the host kernels' (the MPI communicator's); all_reduce is that reduce-scatter of
// nearly equal parts followed by an all-gather of the parts (a ring's bytes). Their scratch,
// under two parts, comes from the staging allocator (set_staging_allocator: the CUDA backend,
// counted as communication; cudaMalloc when none is set). On one rank every sum is the
// identity and runs as at most one device copy; max runs the kernel on the rank's own row.
// Host tensors (the trainer's flags, counts and memory figures, exchanged over the same world
// as the device tensors) travel through device staging, blocking whatever the call.
// send_async/recv_async (ring attention's exchanges) queue nothing at first: NCCL pairs a send
// with its receive only inside one group, so the pending calls are issued together, as one
// ncclGroupStart/End, when the first of their handles is waited on or tested.
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "comm/comm_common.h"
#include "comm/device_communicator.h"
#include "comm/exchange_schedule.h"
#include "comm/nccl/nccl_runtime.h"
#include "comm/nccl/rank_order_reduce.h"
#include "comm/watchdog.h"
#include "core/buffer.h"
#include "core/error.h"

namespace anvil::nccl {
namespace {

// Device memory of one CUDA device straight from cudaMalloc: the staging of a communicator
// that no backend lent its allocator (tests, tools), counted in its own snapshot only.
class CudaMallocAllocator final : public Allocator {
 public:
  explicit CudaMallocAllocator(int device) : device_(device) {}
  Device device() const override { return Device{DeviceType::cuda, device_}; }

 protected:
  void* do_allocate(size_t bytes) override {
    void* data = nullptr;
    NCCL_CUDA_CHECK(cudaSetDevice(device_));
    NCCL_CUDA_CHECK(cudaMalloc(&data, bytes));
    return data;
  }
  void do_deallocate(void* ptr, size_t) override { cudaFree(ptr); }

 private:
  int device_;
};

// A device copy of a host tensor for one staged collective, made and read back on `stream`.
class StagedTensor {
 public:
  // `scratch` holds host.nbytes() on `device`; the stream may already write it.
  StagedTensor(const Tensor& host, int device, Buffer scratch, cudaStream_t stream, bool upload)
      : host_(host), device_(device), stream_(stream), scratch_(std::move(scratch)) {
    if (upload && host.nbytes() > 0) {
      NCCL_CUDA_CHECK(cudaMemcpyAsync(scratch_.data(), host.data, host.nbytes(),
                                      cudaMemcpyHostToDevice, stream_));
    }
  }
  Tensor tensor() const {
    return Tensor(scratch_.data(), host_.dtype, host_.shape, Device{DeviceType::cuda, device_});
  }
  // Copies the device values back into the host tensor (waits for the stream).
  void download() {
    if (host_.nbytes() > 0) {
      NCCL_CUDA_CHECK(cudaMemcpyAsync(host_.data, scratch_.data(), host_.nbytes(),
                                      cudaMemcpyDeviceToHost, stream_));
    }
    NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  Tensor host_;
  int device_;
  cudaStream_t stream_;
  Buffer scratch_;
};

// A collective queued on the communicator's stream; its scratch (may be empty) goes back to
// the staging allocator once the device work is done.
class NcclHandle final : public CommHandle {
 public:
  NcclHandle(cudaStream_t stream, int device, Buffer scratch, const char* name)
      : device_(device), name_(name), scratch_(std::move(scratch)) {
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
    scratch_.reset();
  }

  int device_;
  const char* name_;  // what the collective watchdog reports while wait() blocks
  cudaEvent_t done_ = nullptr;
  Buffer scratch_;
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

// Returns the address of element `index` of `t`.
char* element_address(const Tensor& t, int64_t index) {
  return static_cast<char*>(t.data) + static_cast<size_t>(index) * dtype_size(t.dtype);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, cudaStream_t producer)
      : comm_(comm), device_(device), producer_(producer), default_staging_(device) {
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
      StagedTensor staged = stage(t, /*upload=*/true);
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
      StagedTensor staged = stage(t, /*upload=*/true);
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
      StagedTensor staged = stage(t, /*upload=*/false);
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
      StagedTensor staged = stage(t, /*upload=*/true);
      all_reduce_async(staged.tensor(), op)->wait();
      staged.download();
      return make_completed_handle();
    }
    check_device_tensor(t, "all_reduce tensor");
    if (t.numel() == 0 || (size_ == 1 && op != ReduceOp::max)) return make_completed_handle();
    if (runs_on_nccl(op, t.dtype)) {
      begin();
      NCCL_CHECK(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()),
                               datatype_of(t.dtype), ncclSum, comm_, stream_));
      return handle(Buffer(), "all_reduce_async");
    }
    // Rank r reduces part r in place, then every rank gathers the reduced parts.
    const ExchangeSchedule schedule = plan_exchange(t.numel(), size_);
    Buffer scratch = staging_buffer(static_cast<size_t>(schedule.scratch_elements()) *
                                    dtype_size(t.dtype));
    begin();
    reduce_own_part(t, schedule, op, scratch,
                    element_address(t, schedule.part(rank_).begin));
    gather_parts(t, schedule);
    return handle(std::move(scratch), "all_reduce_async");
  }

  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override {
    if (in.device.is_cpu() && out.device.is_cpu()) {
      StagedTensor staged_in = stage(in, /*upload=*/true);
      StagedTensor staged_out = stage(out, /*upload=*/false);
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
    if (size_ == 1 && op != ReduceOp::max) {  // one rank's sum is its own values
      begin();
      NCCL_CUDA_CHECK(
          cudaMemcpyAsync(out.data, in.data, out.nbytes(), cudaMemcpyDeviceToDevice, stream_));
      return handle(Buffer(), "reduce_scatter_async");
    }
    if (runs_on_nccl(op, in.dtype)) {
      begin();
      NCCL_CHECK(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()),
                                   datatype_of(in.dtype), ncclSum, comm_, stream_));
      return handle(Buffer(), "reduce_scatter_async");
    }
    // The parts of `in` are its slices: chunk_begin splits size * n elements at multiples of n.
    const ExchangeSchedule schedule = plan_exchange(in.numel(), size_);
    Buffer scratch = staging_buffer(static_cast<size_t>(schedule.scratch_elements()) *
                                    dtype_size(in.dtype));
    begin();
    reduce_own_part(in, schedule, op, scratch, out.data);
    return handle(std::move(scratch), "reduce_scatter_async");
  }

  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override {
    if (in.device.is_cpu() && out.device.is_cpu()) {
      // The output is uploaded too, so that an in-place input keeps its place inside it.
      StagedTensor staged_out = stage(out, /*upload=*/overlaps(in, out));
      std::unique_ptr<StagedTensor> staged_in;
      Tensor device_in;
      if (overlaps(in, out)) {
        const auto offset = static_cast<const char*>(in.data) - static_cast<const char*>(out.data);
        device_in = Tensor(static_cast<char*>(staged_out.tensor().data) + offset, in.dtype,
                           in.shape, staged_out.tensor().device);
      } else {
        staged_in = std::make_unique<StagedTensor>(stage(in, /*upload=*/true));
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
    return handle(Buffer(), "all_gather_async");
  }

  // The staging must be memory of this communicator's device (the CUDA backend lends itself).
  void set_staging_allocator(Allocator* allocator) override {
    const Device own_device{DeviceType::cuda, device_};
    ANVIL_CHECK(allocator == nullptr || allocator->device() == own_device,
                "[comm] the NCCL communicator on cuda:{} needs staging memory of that device",
                device_);
    staging_ = allocator;
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

  std::unique_ptr<CommHandle> handle(Buffer scratch, const char* name) {
    return std::make_unique<NcclHandle>(stream_, device_, std::move(scratch), name);
  }

  Allocator& staging() { return staging_ != nullptr ? *staging_ : default_staging_; }

  // Returns `bytes` of device staging (none for 0), counted as communication. Call begin()
  // after it and before the stream writes it: the backend's allocator hands out blocks that
  // work queued on its own stream may still be reading.
  Buffer staging_buffer(size_t bytes) {
    if (bytes == 0) return Buffer();
    return Buffer(staging(), bytes, MemoryCategory::communication);
  }

  // Returns a device copy of a host tensor (uploaded when `upload`) in staging.
  StagedTensor stage(const Tensor& host, bool upload) {
    Buffer scratch = staging_buffer(host.nbytes());
    begin();
    return StagedTensor(host, device_, std::move(scratch), stream_, upload);
  }

  // Reduces every rank's part rank_ of `in` (parts and pieces as `schedule` says) in rank order
  // into `out`, which receives the part's elements. Round by round, one NCCL group sends each
  // other rank its piece of its part and receives this rank's piece from every other rank into
  // a scratch row per sender; then the kernel reduces those rows and this rank's own piece,
  // read in place. This rank's part is never sent, so `out` may be that part of `in`.
  void reduce_own_part(const Tensor& in, const ExchangeSchedule& schedule, ReduceOp op,
                       const Buffer& scratch, void* out) {
    const size_t element = dtype_size(in.dtype);
    const int64_t own_begin = schedule.part(rank_).begin;
    char* rows = static_cast<char*>(scratch.data());
    const size_t row_bytes = static_cast<size_t>(schedule.chunk) * element;
    for (int round = 0; round < schedule.rounds; ++round) {
      const ElementRange piece = schedule.piece(rank_, round);
      if (size_ > 1) {
        NCCL_CHECK(ncclGroupStart());
        for (int peer = 0; peer < size_; ++peer) {
          if (peer == rank_) continue;
          const ElementRange sent = schedule.piece(peer, round);
          if (!sent.empty()) {
            NCCL_CHECK(ncclSend(element_address(in, sent.begin),
                                static_cast<size_t>(sent.size()) * element, ncclUint8, peer,
                                comm_, stream_));
          }
          if (!piece.empty()) {
            const int row = peer < rank_ ? peer : peer - 1;
            NCCL_CHECK(ncclRecv(rows + row * row_bytes,
                                static_cast<size_t>(piece.size()) * element, ncclUint8, peer,
                                comm_, stream_));
          }
        }
        NCCL_CHECK(ncclGroupEnd());
      }
      if (piece.empty()) continue;
      const DeviceRows received{rows, schedule.chunk, element_address(in, piece.begin), rank_,
                                size_};
      void* target =
          static_cast<char*>(out) + static_cast<size_t>(piece.begin - own_begin) * element;
      if (op == ReduceOp::max) {
        launch_max_of_rows(received, piece.size(), in.dtype, target, stream_);
      } else {
        launch_sum_in_rank_order(received, piece.size(), in.dtype, target, stream_);
      }
    }
  }

  // Sends this rank's part of `t` (reduced in place) to every rank and receives theirs.
  void gather_parts(const Tensor& t, const ExchangeSchedule& schedule) {
    if (size_ == 1) return;
    const ElementRange mine = schedule.part(rank_);
    const size_t element = dtype_size(t.dtype);
    if (t.numel() % size_ == 0) {  // equal parts: NCCL's in-place all-gather
      NCCL_CHECK(ncclAllGather(element_address(t, mine.begin), t.data,
                               static_cast<size_t>(mine.size()) * element, ncclUint8, comm_,
                               stream_));
      return;
    }
    NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      const ElementRange theirs = schedule.part(peer);
      if (peer == rank_) continue;
      if (!mine.empty()) {
        NCCL_CHECK(ncclSend(element_address(t, mine.begin),
                            static_cast<size_t>(mine.size()) * element, ncclUint8, peer, comm_,
                            stream_));
      }
      if (!theirs.empty()) {
        NCCL_CHECK(ncclRecv(element_address(t, theirs.begin),
                            static_cast<size_t>(theirs.size()) * element, ncclUint8, peer, comm_,
                            stream_));
      }
    }
    NCCL_CHECK(ncclGroupEnd());
  }

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  cudaStream_t producer_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t producer_ready_ = nullptr;
  float* barrier_word_ = nullptr;
  CudaMallocAllocator default_staging_;  // the staging while no allocator is set
  Allocator* staging_ = nullptr;         // set_staging_allocator's, or null
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
