// CommHandle implementations over MPI requests. A handle that is destroyed unfinished waits,
// because MPI may still read or write the caller's tensors; if that wait fails the job is
// aborted (a destructor cannot throw, and carrying on would corrupt memory).
#include "comm/mpi/mpi_handles.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "comm/reduce_kernels.h"
#include "comm/watchdog.h"

namespace anvil::mpi {
namespace {

class RoundsHandle;

// Ordered sums started and not yet finished, in start order. Every wait advances all of them,
// so a rank blocked on one operation still plays its part in the others; without that, two
// ranks waiting on different operations first would each wait for the other forever.
// Communicators are used by one thread at a time (MPI_THREAD_SERIALIZED), so no lock.
std::vector<RoundsHandle*> pending_rounds;

void advance_pending_rounds();

void wait_before_destruction(CommHandle& handle) {
  if (!active()) return;
  try {
    handle.wait();
  } catch (const Error& e) {
    fmt::print(stderr, "anvil: error: {} (while discarding an unfinished collective)\n",
               e.what());
    abort_world(1);
  }
}

class RequestHandle final : public CommHandle {
 public:
  RequestHandle(MPI_Request request, const char* name) : request_(request), name_(name) {}
  // A receive: once complete, the message must have held `expected` elements of `type`.
  RequestHandle(MPI_Request request, const char* name, int expected, MPI_Datatype type, int peer)
      : request_(request), name_(name), expected_(expected), type_(type), peer_(peer) {}
  ~RequestHandle() override { wait_before_destruction(*this); }

  void wait() override {
    const CollectiveScope scope(name_);
    while (!test()) advance_pending_rounds();
  }

  bool test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Status status;
    MPI_CHECK(MPI_Test(&request_, &done, &status));
    if (done != 0 && expected_ >= 0) {
      int received = 0;
      MPI_CHECK(MPI_Get_count(&status, type_, &received));
      ANVIL_CHECK(received == expected_,
                  "[comm] recv_async from rank {} expected {} elements but the message held {}",
                  peer_, expected_, received);
    }
    return done != 0;
  }

 private:
  MPI_Request request_;  // MPI sets it to MPI_REQUEST_NULL once complete
  const char* name_;
  int expected_ = -1;  // receives only
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int peer_ = -1;
};

// A rank-order sum in flight: point-to-point messages whose later steps depend on earlier
// ones' data, advanced (never blocking) by advance() until it returns true. Sends that need
// no follow-up run in the background and must also have finished before the handle is done.
class RoundsHandle : public CommHandle {
 public:
  ~RoundsHandle() override { std::erase(pending_rounds, this); }

  void wait() override {
    const CollectiveScope scope(name_);
    while (!finished_) advance_pending_rounds();
  }

  bool test() override {
    if (finished_) return true;
    if (!advance()) return false;
    int done = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(background_.size()), background_.data(), &done,
                          MPI_STATUSES_IGNORE));
    if (!done) return false;
    finished_ = true;
    std::erase(pending_rounds, this);
    return true;
  }

 protected:
  // Moves the operation on as far as arrived data allows; returns whether its own steps are
  // done (the background sends are checked by test()).
  virtual bool advance() = 0;

  // Starts a send or receive of the current round, which round_complete() checks.
  void post_send(const void* data, int count, int peer) {
    requests_.emplace_back();
    MPI_CHECK(MPI_Isend(data, count, type_, peer, tag_, comm_, &requests_.back()));
  }
  void post_recv(void* data, int count, int peer) { requests_.push_back(start_recv(data, count, peer)); }
  // Returns whether every request of the current round has completed.
  bool round_complete() {
    int done = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                          MPI_STATUSES_IGNORE));
    if (done) requests_.clear();
    return done != 0;
  }
  void post_background_send(const void* data, int count, int peer) {
    background_.emplace_back();
    MPI_CHECK(MPI_Isend(data, count, type_, peer, tag_, comm_, &background_.back()));
  }
  MPI_Request start_recv(void* data, int count, int peer) {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Irecv(data, count, type_, peer, tag_, comm_, &request));
    return request;
  }

  RoundsHandle(DType dtype, MPI_Comm comm, int tag, const char* name)
      : dtype_(dtype), comm_(comm), tag_(tag), name_(name) {
    type_ = datatype_of(dtype);
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    pending_rounds.push_back(this);
  }

  DType dtype_;
  MPI_Datatype type_;
  MPI_Comm comm_;
  int tag_;
  const char* name_;
  int rank_ = 0;
  int size_ = 1;
  bool finished_ = false;
  std::vector<MPI_Request> requests_;    // the current round
  std::vector<MPI_Request> background_;  // sends that only need to finish
};

void advance_pending_rounds() {
  // test() may remove finished handles from the list, so walk a copy.
  const std::vector<RoundsHandle*> pending = pending_rounds;
  for (RoundsHandle* handle : pending) handle->test();
}

// Receives every rank's copy of one slice and adds them in rank order as they arrive: the
// sends of this rank's slices to every peer start at once, the receives run in rank order
// through kReceiveBuffers buffers, so the staging is a few slices whatever the world size.
class ChainedSum {
 public:
  static constexpr int kReceiveBuffers = 2;

  // Starts a receive of `count` elements from a rank into a buffer.
  using PostRecv = std::function<MPI_Request(void* data, int rank)>;

  // Expects `ranks` contributions of `count` elements, rank `self`'s being `own`; `out`
  // receives the sum (it may be `own` only when `self` is 0, whose contribution comes first).
  // Posts the first receives.
  ChainedSum(DType dtype, int64_t count, int ranks, int self, const void* own, void* out,
             Allocator& staging, PostRecv post_recv)
      : count_(count), ranks_(ranks), self_(self), own_(own), sum_(dtype, count, out, staging),
        post_recv_(std::move(post_recv)) {
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    for (int b = 0; b < std::min(ranks - 1, kReceiveBuffers); ++b)
      buffers_[b] = Buffer(staging, bytes, MemoryCategory::communication);
    post_receives();
  }

  // Adds every contribution that has arrived, in rank order; returns whether all are in
  // (and the sum written).
  bool advance() {
    if (done_) return true;
    while (sum_.added() < ranks_) {
      const int rank = sum_.added();
      if (rank == self_) {
        sum_.add(own_);
        continue;
      }
      Posted& oldest = posted_.front();
      int done = 0;
      MPI_CHECK(MPI_Test(&oldest.request, &done, MPI_STATUS_IGNORE));
      if (!done) return false;
      sum_.add(buffers_[oldest.buffer].data());
      posted_.erase(posted_.begin());
      post_receives();
    }
    sum_.finish();
    done_ = true;
    return true;
  }

 private:
  struct Posted {
    MPI_Request request = MPI_REQUEST_NULL;
    int buffer = 0;
  };

  // Posts receives in rank order while a buffer is free.
  void post_receives() {
    while (static_cast<int>(posted_.size()) < kReceiveBuffers && next_to_post_ < ranks_) {
      const int rank = next_to_post_++;
      if (rank == self_) continue;
      if (count_ == 0) {  // both ends skip an empty message
        posted_.push_back({MPI_REQUEST_NULL, 0});
        continue;
      }
      const int buffer = receives_++ % kReceiveBuffers;
      posted_.push_back({post_recv_(buffers_[buffer].data(), rank), buffer});
    }
  }

  int64_t count_;
  int ranks_;
  int self_;
  const void* own_;
  RankOrderSum sum_;
  PostRecv post_recv_;
  Buffer buffers_[kReceiveBuffers];
  std::vector<Posted> posted_;  // receives in flight, oldest (lowest rank) first
  int next_to_post_ = 0;
  int receives_ = 0;  // receives posted so far; the k-th uses buffer k % kReceiveBuffers
  bool done_ = false;
};

class OrderedAllReduce final : public RoundsHandle {
 public:
  OrderedAllReduce(const Tensor& t, MPI_Comm comm, int tag, const char* name, Allocator& staging)
      : RoundsHandle(t.dtype, comm, tag, name), tensor_(t) {
    const int64_t total = t.numel();
    for (int r = 0; r <= size_; ++r) chunk_begin_.push_back(chunk_begin(total, size_, r));
    const int64_t mine = chunk_count(rank_);
    // The sum overwrites this rank's chunk, which later ranks' contributions are added to, so
    // rank 0 alone (whose contribution comes first) sums in place.
    const void* own = chunk(rank_);
    if (rank_ != 0 && mine > 0) {
      own_copy_ = Buffer(staging, static_cast<size_t>(mine) * element(),
                         MemoryCategory::communication);
      std::memcpy(own_copy_.data(), chunk(rank_), static_cast<size_t>(mine) * element());
      own = own_copy_.data();
    }
    // Chunk r of this rank's tensor goes to rank r. Every rank computes the same chunk sizes,
    // so both ends of an empty message skip it.
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && chunk_count(r) > 0)
        post_background_send(chunk(r), static_cast<int>(chunk_count(r)), r);
    }
    chain_.emplace(dtype_, mine, size_, rank_, own, chunk(rank_), staging,
                   [this, mine](void* data, int r) {
                     return start_recv(data, static_cast<int>(mine), r);
                   });
  }
  ~OrderedAllReduce() override { wait_before_destruction(*this); }

 private:
  bool advance() override {
    if (!summed_) {
      if (!chain_->advance()) return false;
      summed_ = true;
      // Round 2: this rank's summed chunk goes to every rank, every other chunk comes in. It
      // reuses round 1's tag: MPI never lets a sender's later message overtake an earlier one
      // with the same tag, so each receive matches the round it was posted for.
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        if (chunk_count(r) > 0) post_recv(chunk(r), static_cast<int>(chunk_count(r)), r);
        if (chunk_count(rank_) > 0)
          post_send(chunk(rank_), static_cast<int>(chunk_count(rank_)), r);
      }
    }
    return round_complete();
  }

  size_t element() const { return dtype_size(dtype_); }
  int64_t chunk_count(int r) const { return chunk_begin_[r + 1] - chunk_begin_[r]; }
  char* chunk(int r) const {
    return static_cast<char*>(tensor_.data) + chunk_begin_[r] * static_cast<int64_t>(element());
  }

  Tensor tensor_;
  std::vector<int64_t> chunk_begin_;
  Buffer own_copy_;
  std::optional<ChainedSum> chain_;
  bool summed_ = false;
};

class OrderedReduceScatter final : public RoundsHandle {
 public:
  OrderedReduceScatter(const Tensor& in, const Tensor& out, MPI_Comm comm, int tag,
                       const char* name, Allocator& staging)
      : RoundsHandle(in.dtype, comm, tag, name) {
    const int count = static_cast<int>(out.numel());
    const size_t slice_bytes = out.nbytes();
    const char* input = static_cast<const char*>(in.data);
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && count > 0)
        post_background_send(input + slice_bytes * static_cast<size_t>(r), count, r);
    }
    chain_.emplace(dtype_, out.numel(), size_, rank_,
                   input + slice_bytes * static_cast<size_t>(rank_), out.data, staging,
                   [this, count](void* data, int r) { return start_recv(data, count, r); });
  }
  ~OrderedReduceScatter() override { wait_before_destruction(*this); }

 private:
  bool advance() override { return chain_->advance(); }

  std::optional<ChainedSum> chain_;
};

}  // namespace

std::unique_ptr<CommHandle> make_request_handle(MPI_Request request, const char* name) {
  return std::make_unique<RequestHandle>(request, name);
}

std::unique_ptr<CommHandle> make_recv_handle(MPI_Request request, int expected, MPI_Datatype type,
                                             int peer) {
  return std::make_unique<RequestHandle>(request, "recv_async", expected, type, peer);
}

std::unique_ptr<CommHandle> start_ordered_all_reduce(const Tensor& t, MPI_Comm comm, int tag,
                                                     const char* name, Allocator& staging) {
  return std::make_unique<OrderedAllReduce>(t, comm, tag, name, staging);
}

std::unique_ptr<CommHandle> start_ordered_reduce_scatter(const Tensor& in, const Tensor& out,
                                                         MPI_Comm comm, int tag,
                                                         const char* name, Allocator& staging) {
  return std::make_unique<OrderedReduceScatter>(in, out, comm, tag, name, staging);
}

}  // namespace anvil::mpi
