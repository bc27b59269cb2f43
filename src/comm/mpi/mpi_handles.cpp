// CommHandle implementations over MPI requests. A handle that is destroyed unfinished waits,
// because MPI may still read or write the caller's tensors; if that wait fails the job is
// aborted (a destructor cannot throw, and carrying on would corrupt memory).
#include "comm/mpi/mpi_handles.h"

#include <algorithm>
#include <cstring>
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

// A sequence of message rounds; each round's requests must all finish before the next round
// (computed from the previous one's data) is posted.
class RoundsHandle : public CommHandle {
 public:
  ~RoundsHandle() override { std::erase(pending_rounds, this); }

  void wait() override {
    const CollectiveScope scope(name_);
    while (!finished_) advance_pending_rounds();
  }

  bool test() override {
    while (!finished_) {
      int done = 0;
      MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                            MPI_STATUSES_IGNORE));
      if (!done) return false;
      requests_.clear();
      on_round_complete();
    }
    std::erase(pending_rounds, this);
    return true;
  }

 protected:
  // Runs when the current round is complete: posts the next round or sets finished_.
  virtual void on_round_complete() = 0;

  void post_send(const void* data, int count, int peer) {
    requests_.emplace_back();
    MPI_CHECK(MPI_Isend(data, count, type_, peer, tag_, comm_, &requests_.back()));
  }
  void post_recv(void* data, int count, int peer) {
    requests_.emplace_back();
    MPI_CHECK(MPI_Irecv(data, count, type_, peer, tag_, comm_, &requests_.back()));
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
  std::vector<MPI_Request> requests_;
};

void advance_pending_rounds() {
  // test() may remove finished handles from the list, so walk a copy.
  const std::vector<RoundsHandle*> pending = pending_rounds;
  for (RoundsHandle* handle : pending) handle->test();
}

class OrderedAllReduce final : public RoundsHandle {
 public:
  OrderedAllReduce(const Tensor& t, MPI_Comm comm, int tag, const char* name, Allocator& staging)
      : RoundsHandle(t.dtype, comm, tag, name), tensor_(t) {
    const int64_t total = t.numel();
    for (int r = 0; r <= size_; ++r) chunk_begin_.push_back(chunk_begin(total, size_, r));
    const int64_t mine = chunk_count(rank_);
    contributions_ = Buffer(staging, static_cast<size_t>(mine * size_) * dtype_size(dtype_),
                            MemoryCategory::communication);
    // Round 1: chunk r of every rank's tensor goes to rank r. Every rank computes the same
    // chunk sizes, so both ends of an empty message skip it.
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        if (mine > 0)
          std::memcpy(contribution(r), chunk(rank_), static_cast<size_t>(mine) * element());
        continue;
      }
      if (mine > 0) post_recv(contribution(r), static_cast<int>(mine), r);
      if (chunk_count(r) > 0) post_send(chunk(r), static_cast<int>(chunk_count(r)), r);
    }
  }
  ~OrderedAllReduce() override { wait_before_destruction(*this); }

 private:
  void on_round_complete() override {
    if (summed_) {
      finished_ = true;
      return;
    }
    // Round 2: this rank's summed chunk goes to every rank, every other chunk comes in. It
    // reuses round 1's tag: MPI never lets a sender's later message overtake an earlier one
    // with the same tag, so each receive matches the round it was posted for.
    sum_in_rank_order(contributions(), size_, chunk_count(rank_), dtype_, chunk(rank_));
    summed_ = true;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (chunk_count(r) > 0) post_recv(chunk(r), static_cast<int>(chunk_count(r)), r);
      if (chunk_count(rank_) > 0)
        post_send(chunk(rank_), static_cast<int>(chunk_count(rank_)), r);
    }
  }

  size_t element() const { return dtype_size(dtype_); }
  int64_t chunk_count(int r) const { return chunk_begin_[r + 1] - chunk_begin_[r]; }
  char* chunk(int r) const {
    return static_cast<char*>(tensor_.data) + chunk_begin_[r] * static_cast<int64_t>(element());
  }
  char* contributions() const { return static_cast<char*>(contributions_.data()); }
  char* contribution(int r) const {
    return contributions() + r * chunk_count(rank_) * static_cast<int64_t>(element());
  }

  Tensor tensor_;
  std::vector<int64_t> chunk_begin_;
  Buffer contributions_;  // [rank][this rank's chunk]
  bool summed_ = false;
};

class OrderedReduceScatter final : public RoundsHandle {
 public:
  OrderedReduceScatter(const Tensor& in, const Tensor& out, MPI_Comm comm, int tag,
                       const char* name, Allocator& staging)
      : RoundsHandle(in.dtype, comm, tag, name), out_(out) {
    const int count = static_cast<int>(out.numel());
    const size_t slice_bytes = out.nbytes();
    contributions_ = Buffer(staging, slice_bytes * static_cast<size_t>(size_),
                            MemoryCategory::communication);
    char* contributions = static_cast<char*>(contributions_.data());
    const char* input = static_cast<const char*>(in.data);
    for (int r = 0; r < size_; ++r) {
      char* from_r = contributions + slice_bytes * static_cast<size_t>(r);
      const char* slice_r = input + slice_bytes * static_cast<size_t>(r);
      if (r == rank_) {
        std::memcpy(from_r, slice_r, slice_bytes);
      } else {
        post_recv(from_r, count, r);
        post_send(slice_r, count, r);
      }
    }
  }
  ~OrderedReduceScatter() override { wait_before_destruction(*this); }

 private:
  void on_round_complete() override {
    sum_in_rank_order(contributions_.data(), size_, out_.numel(), dtype_, out_.data);
    finished_ = true;
  }

  Tensor out_;
  Buffer contributions_;  // [rank][slice]
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
