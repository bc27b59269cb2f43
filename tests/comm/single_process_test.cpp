// The single-process communicator: reductions keep the data, reduce_scatter and all_gather
// copy, send/recv to oneself work in FIFO order, async handles come back complete, and bad
// arguments fail with the same checks the MPI communicator applies. Also: world() without a
// launcher is this communicator and does not start MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/communicator.h"

#ifdef ANVIL_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace anvil {
namespace {

Tensor tensor_of(std::vector<float>& values) {
  return Tensor(values.data(), DType::f32, Shape{static_cast<int64_t>(values.size())});
}

TEST(SingleProcessCommunicator, IsRankZeroOfOne) {
  auto comm = make_single_process_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  auto sub = comm->split(3, -7);
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_THROW(comm->split(-1, 0), Error);
}

TEST(SingleProcessCommunicator, ReductionsKeepTheData) {
  auto comm = make_single_process_communicator();
  std::vector<float> values = {1.5f, -2.0f, NAN, -0.0f};
  const std::vector<float> before = values;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::ordered_sum}) {
    comm->all_reduce(tensor_of(values), op);
    EXPECT_EQ(std::memcmp(values.data(), before.data(), values.size() * sizeof(float)), 0)
        << reduce_op_name(op);
    auto handle = comm->all_reduce_async(tensor_of(values), op);
    EXPECT_TRUE(handle->test());
    handle->wait();
    EXPECT_EQ(std::memcmp(values.data(), before.data(), values.size() * sizeof(float)), 0);
  }
}

TEST(SingleProcessCommunicator, ReduceScatterAndAllGatherCopy) {
  auto comm = make_single_process_communicator();
  std::vector<float> in = {1, 2, 3, 4, 5, 6};
  std::vector<float> out(6, 0.0f);
  comm->reduce_scatter(Tensor(in.data(), DType::f32, Shape{2, 3}), tensor_of(out));
  EXPECT_EQ(out, in);

  std::vector<float> gathered(6, 0.0f);
  comm->all_gather(tensor_of(in), tensor_of(gathered));
  EXPECT_EQ(gathered, in);

  std::vector<float> async_out(6, 0.0f);
  comm->reduce_scatter_async(tensor_of(in), tensor_of(async_out), ReduceOp::ordered_sum)->wait();
  EXPECT_EQ(async_out, in);
  std::fill(async_out.begin(), async_out.end(), 0.0f);
  EXPECT_TRUE(comm->all_gather_async(tensor_of(in), tensor_of(async_out))->test());
  EXPECT_EQ(async_out, in);

  // In place: the input is rank 0's slice of the output, which for one rank is all of it.
  comm->all_gather(tensor_of(in), tensor_of(in));
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(SingleProcessCommunicator, RejectsBadCollectiveArguments) {
  auto comm = make_single_process_communicator();
  std::vector<float> six(6), five(5);
  std::vector<int32_t> ints(6);
  const Tensor int_tensor(ints.data(), DType::i32, Shape{6});
  EXPECT_THROW(comm->reduce_scatter(tensor_of(six), tensor_of(five)), Error);
  EXPECT_THROW(comm->reduce_scatter(tensor_of(six), int_tensor), Error);
  EXPECT_THROW(comm->all_gather(tensor_of(five), tensor_of(six)), Error);
  EXPECT_THROW(comm->all_gather(int_tensor, tensor_of(six)), Error);
  // Overlapping buffers that are not the in-place form.
  const Tensor whole = tensor_of(six);
  EXPECT_THROW(comm->reduce_scatter(whole, whole), Error);
  EXPECT_THROW(comm->all_gather(whole.flat(1, 5).view(Shape{5}), whole.flat(0, 5)), Error);
  EXPECT_THROW(comm->broadcast(whole, 1), Error);
  EXPECT_NO_THROW(comm->broadcast(whole, 0));
  const Tensor on_device(six.data(), DType::f32, Shape{6}, Device{DeviceType::cuda, 0});
  EXPECT_THROW(comm->all_gather(on_device, whole), Error);
  try {
    comm->reduce_scatter(tensor_of(six), tensor_of(five));
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[comm] reduce_scatter over 1 ranks needs an input of 1 x 5 elements, got 6");
  }
}

TEST(SingleProcessCommunicator, SendToSelfArrivesInOrder) {
  auto comm = make_single_process_communicator();
  std::vector<float> first = {1, 2, 3};
  std::vector<float> second = {4, 5};
  comm->send(tensor_of(first), 0);
  comm->send(tensor_of(second), 0);
  first.assign(3, 0.0f);
  std::vector<float> wrong_size(3);
  EXPECT_NO_THROW(comm->recv(tensor_of(first), 0));
  EXPECT_EQ(first, (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(comm->recv(tensor_of(wrong_size), 0), Error);
  std::vector<float> received(2);
  comm->recv(tensor_of(received), 0);
  EXPECT_EQ(received, second);
  EXPECT_THROW(comm->recv(tensor_of(received), 0), Error);  // nothing left: would hang
  EXPECT_THROW(comm->send(tensor_of(received), 1), Error);
  EXPECT_THROW(comm->recv(tensor_of(received), -1), Error);
}

TEST(SingleProcessCommunicator, AsyncRecvPostedBeforeTheSendCompletesOnWait) {
  auto comm = make_single_process_communicator();
  std::vector<float> received(3);
  auto recv = comm->recv_async(tensor_of(received), 0);  // a ring posts its receive first
  std::vector<float> sent = {7, 8, 9};
  auto send = comm->send_async(tensor_of(sent), 0);
  send->wait();
  recv->wait();
  EXPECT_EQ(received, sent);
  std::vector<float> wrong_size(2);
  comm->send(tensor_of(sent), 0);
  EXPECT_THROW(comm->recv_async(tensor_of(wrong_size), 0)->wait(), Error);
  EXPECT_THROW(comm->send_async(tensor_of(sent), 1), Error);
}

TEST(SingleProcessCommunicator, EmptyTensorsAreFine) {
  auto comm = make_single_process_communicator();
  const Tensor empty(nullptr, DType::bf16, Shape{0});
  EXPECT_NO_THROW(comm->all_reduce(empty));
  EXPECT_NO_THROW(comm->reduce_scatter(empty, empty));
  EXPECT_NO_THROW(comm->all_gather(empty, empty));
  EXPECT_NO_THROW(comm->broadcast(empty, 0));
}

TEST(World, WithoutLauncherIsOneProcessAndLeavesMpiAlone) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr) << "run this test without mpirun";
#ifndef ANVIL_HAVE_MPI
  // Without MPI, a multi-rank launch must fail instead of training N unaware copies.
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_THROW(world(), Error);
  unsetenv("OMPI_COMM_WORLD_SIZE");
#endif
  Communicator& comm = world();
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(&comm, &world());
#ifdef ANVIL_HAVE_MPI
  int initialized = 1;
  MPI_Initialized(&initialized);
  EXPECT_EQ(initialized, 0);
#endif
  EXPECT_FALSE(mpi_description().empty());
}

TEST(ReduceOp, Names) {
  EXPECT_STREQ(reduce_op_name(ReduceOp::sum), "sum");
  EXPECT_STREQ(reduce_op_name(ReduceOp::max), "max");
  EXPECT_STREQ(reduce_op_name(ReduceOp::ordered_sum), "ordered_sum");
}

}  // namespace
}  // namespace anvil
