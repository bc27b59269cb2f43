// Collectives over MPI. Plain sums, max, gathers and broadcasts map onto one MPI call each
// (the library picks the algorithm); rank-order sums run as anvil's own message rounds (see
// mpi_handles.h) on a second, private communicator whose tags come from a counter that every
// rank advances identically, because every rank starts the same operations in the same order.
#include "comm/mpi/mpi_communicator.h"

#include "comm/comm_common.h"
#include "comm/mpi/mpi_handles.h"
#include "comm/watchdog.h"

namespace anvil::mpi {
namespace {

constexpr int kUserTag = 0;  // send/recv traffic; ordered sums use their own communicator

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_CHECK(MPI_Comm_dup(comm_, &ordered_comm_));
    void* tag_ub = nullptr;
    int found = 0;
    MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found));
    if (found) max_tag_ = *static_cast<int*>(tag_ub);
  }

  ~MpiCommunicator() override {
    if (!active()) return;
    MPI_Comm_free(&ordered_comm_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ANVIL_CHECK(color >= 0, "[comm] split color must be >= 0, got {}", color);
    MPI_Comm sub = MPI_COMM_NULL;
    {
      const CollectiveScope scope("split");
      MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    }
    return make_mpi_communicator(sub);
  }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    const int count = check_all_reduce(t);
    if (count == 0) return;
    const CollectiveScope scope("all_reduce");
    if (runs_as_ordered_sum(op, t.dtype)) {
      start_ordered_all_reduce(t, ordered_comm_, next_tag(), "all_reduce", staging())->wait();
      return;
    }
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data, count, datatype_of(t.dtype),
                            op_for(op, t.dtype), comm_));
  }

  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_reduce_scatter_args(in, out, size_);
    const int count = count_of(in, "reduce_scatter input") / size_;
    if (count == 0) return;
    const CollectiveScope scope("reduce_scatter");
    if (runs_as_ordered_sum(op, in.dtype)) {
      start_ordered_reduce_scatter(in, out, ordered_comm_, next_tag(), "reduce_scatter",
                                   staging())
          ->wait();
      return;
    }
    MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, count, datatype_of(in.dtype),
                                       op_for(op, in.dtype), comm_));
  }

  void all_gather(const Tensor& in, const Tensor& out) override {
    check_all_gather_args(in, out, rank_, size_);
    const int count = count_of(out, "all_gather output") / size_;
    if (count == 0) return;
    const MPI_Datatype type = datatype_of(in.dtype);
    const CollectiveScope scope("all_gather");
    MPI_CHECK(MPI_Allgather(gather_source(in, out), count, type, out.data, count, type, comm_));
  }

  void broadcast(const Tensor& t, int root) override {
    check_rank_arg(root, size_, "broadcast root");
    check_host_tensor(t, "broadcast tensor");
    const int count = count_of(t, "broadcast tensor");
    if (count == 0) return;
    const CollectiveScope scope("broadcast");
    MPI_CHECK(MPI_Bcast(t.data, count, datatype_of(t.dtype), root, comm_));
  }

  void barrier() override {
    const CollectiveScope scope("barrier");
    MPI_CHECK(MPI_Barrier(comm_));
  }

  void send(const Tensor& t, int peer) override {
    check_rank_arg(peer, size_, "send peer");
    check_host_tensor(t, "send tensor");
    const CollectiveScope scope("send");
    MPI_CHECK(MPI_Send(t.data, count_of(t, "send tensor"), datatype_of(t.dtype), peer, kUserTag,
                       comm_));
  }

  void recv(const Tensor& t, int peer) override {
    check_rank_arg(peer, size_, "recv peer");
    check_host_tensor(t, "recv tensor");
    const int expected = count_of(t, "recv tensor");
    const MPI_Datatype type = datatype_of(t.dtype);
    MPI_Status status;
    {
      const CollectiveScope scope("recv");
      MPI_CHECK(MPI_Recv(t.data, expected, type, peer, kUserTag, comm_, &status));
    }
    int received = 0;
    MPI_CHECK(MPI_Get_count(&status, type, &received));
    ANVIL_CHECK(received == expected,
                "[comm] recv from rank {} expected {} {} elements but the message held {}", peer,
                expected, dtype_name(t.dtype), received);
  }

  std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t, ReduceOp op) override {
    const int count = check_all_reduce(t);
    if (count == 0) return make_completed_handle();
    if (runs_as_ordered_sum(op, t.dtype))
      return start_ordered_all_reduce(t, ordered_comm_, next_tag(), "all_reduce_async",
                                      staging());
    MPI_Request request;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data, count, datatype_of(t.dtype),
                             op_for(op, t.dtype), comm_, &request));
    return make_request_handle(request, "all_reduce_async");
  }

  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                   ReduceOp op) override {
    check_reduce_scatter_args(in, out, size_);
    const int count = count_of(in, "reduce_scatter input") / size_;
    if (count == 0) return make_completed_handle();
    if (runs_as_ordered_sum(op, in.dtype))
      return start_ordered_reduce_scatter(in, out, ordered_comm_, next_tag(),
                                          "reduce_scatter_async", staging());
    MPI_Request request;
    MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, count, datatype_of(in.dtype),
                                        op_for(op, in.dtype), comm_, &request));
    return make_request_handle(request, "reduce_scatter_async");
  }

  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) override {
    check_all_gather_args(in, out, rank_, size_);
    const int count = count_of(out, "all_gather output") / size_;
    if (count == 0) return make_completed_handle();
    const MPI_Datatype type = datatype_of(in.dtype);
    MPI_Request request;
    MPI_CHECK(MPI_Iallgather(gather_source(in, out), count, type, out.data, count, type, comm_,
                             &request));
    return make_request_handle(request, "all_gather_async");
  }

  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) override {
    check_rank_arg(peer, size_, "send peer");
    check_host_tensor(t, "send tensor");
    MPI_Request request;
    MPI_CHECK(MPI_Isend(t.data, count_of(t, "send tensor"), datatype_of(t.dtype), peer, kUserTag,
                        comm_, &request));
    return make_request_handle(request, "send_async");
  }

  std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) override {
    check_rank_arg(peer, size_, "recv peer");
    check_host_tensor(t, "recv tensor");
    const int expected = count_of(t, "recv tensor");
    const MPI_Datatype type = datatype_of(t.dtype);
    MPI_Request request;
    MPI_CHECK(MPI_Irecv(t.data, expected, type, peer, kUserTag, comm_, &request));
    return make_recv_handle(request, expected, type, peer);
  }

  void set_staging_allocator(Allocator* allocator) override { staging_ = allocator; }

 private:
  Allocator& staging() const { return staging_ ? *staging_ : HostAllocator::instance(); }

  int check_all_reduce(const Tensor& t) const {
    check_host_tensor(t, "all_reduce tensor");
    return count_of(t, "all_reduce tensor");
  }

  const void* gather_source(const Tensor& in, const Tensor& out) const {
    return all_gather_is_in_place(in, out, rank_) ? MPI_IN_PLACE : in.data;
  }

  int next_tag() {
    const int tag = next_tag_;
    next_tag_ = next_tag_ == max_tag_ ? 0 : next_tag_ + 1;
    return tag;
  }

  MPI_Comm comm_;
  MPI_Comm ordered_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int max_tag_ = 32767;  // the least MPI_TAG_UB the standard allows
  int next_tag_ = 0;
  Allocator* staging_ = nullptr;  // the ordered sums' staging; null: HostAllocator
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace anvil::mpi
