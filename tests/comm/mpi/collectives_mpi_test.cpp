// The MPI communicator's collectives against values every rank can compute on its own:
// sums (exact, integer-valued floats, so any summation order gives the same answer), max with
// NaN and signed zeros, reduce_scatter slices, all_gather order, broadcast from every root,
// integer and 16-bit dtypes, the async ring exchange, and the message MPI_CHECK gives when MPI
// reports an error.
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <vector>

#include "comm/counting_communicator.h"
#include "comm/mpi/mpi_runtime.h"
#include "mpi_test_util.h"

namespace anvil {
namespace {

using namespace testing_mpi;

TEST(MpiCollectives, WorldMatchesTheLauncher) {
  Communicator& comm = world();
  EXPECT_EQ(comm.size(), std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  std::vector<int32_t> ranks(comm.size(), -1);
  int32_t mine = comm.rank();
  comm.all_gather(Tensor(&mine, DType::i32, Shape{1}),
                  Tensor(ranks.data(), DType::i32, Shape{comm.size()}));
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(ranks[r], r);
}

TEST(MpiCollectives, AllReduceSumOfFloats) {
  Communicator& comm = world();
  // Small, medium and large messages take different algorithms inside Open MPI.
  for (int64_t count : {1, 7, 1000, 100003}) {
    std::vector<float> values(count);
    for (int64_t i = 0; i < count; ++i) values[i] = exact_value(comm.rank(), i);
    comm.all_reduce(f32_tensor(values), ReduceOp::sum);
    int wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      float expected = 0.0f;
      for (int r = 0; r < comm.size(); ++r) expected += exact_value(r, i);
      wrong += values[i] != expected;
    }
    EXPECT_EQ(wrong, 0) << count << " elements";
  }
}

TEST(MpiCollectives, AllReduceOfIntegersWraps) {
  Communicator& comm = world();
  std::vector<int32_t> ints = {comm.rank() + 1, INT_MAX, -comm.rank()};
  comm.all_reduce(Tensor(ints.data(), DType::i32, Shape{3}), ReduceOp::sum);
  const int p = comm.size();
  EXPECT_EQ(ints[0], p * (p + 1) / 2);
  EXPECT_EQ(ints[1], static_cast<int32_t>(static_cast<uint32_t>(INT_MAX) * static_cast<uint32_t>(p)));
  EXPECT_EQ(ints[2], -p * (p - 1) / 2);

  std::vector<uint32_t> words = {4000000000u, static_cast<uint32_t>(comm.rank())};
  comm.all_reduce(Tensor(words.data(), DType::u32, Shape{2}), ReduceOp::max);
  EXPECT_EQ(words, (std::vector<uint32_t>{4000000000u, static_cast<uint32_t>(p - 1)}));

  std::vector<uint16_t> shorts = {65535, static_cast<uint16_t>(comm.rank())};
  comm.all_reduce(u16_tensor(shorts, DType::u16), ReduceOp::sum);
  EXPECT_EQ(shorts[0], static_cast<uint16_t>(65535 * p));
  EXPECT_EQ(shorts[1], p * (p - 1) / 2);

  std::vector<int32_t> ordered = {comm.rank() - 1};
  comm.all_reduce(Tensor(ordered.data(), DType::i32, Shape{1}), ReduceOp::ordered_sum);
  EXPECT_EQ(ordered[0], p * (p - 1) / 2 - p);
}

TEST(MpiCollectives, AllReduceMaxHandlesNanAndSignedZeros) {
  Communicator& comm = world();
  const int last = comm.size() - 1;
  std::vector<float> values = {
      static_cast<float>(comm.rank() * 3 - 5),                // largest on the last rank
      comm.rank() == 1 ? NAN : 1.0f,                          // one rank has a NaN
      comm.rank() == 0 ? 0.0f : -0.0f,                        // +0 beats -0
      -static_cast<float>(comm.rank()) - 1.0f,                // largest on rank 0
  };
  comm.all_reduce(f32_tensor(values), ReduceOp::max);
  EXPECT_EQ(values[0], static_cast<float>(last * 3 - 5));
  EXPECT_EQ(bits(values[1]), 0x7fc00000u);
  EXPECT_EQ(bits(values[2]), 0u);
  EXPECT_EQ(values[3], -1.0f);

  std::vector<uint16_t> bf16 = {float_to_bf16(-1.0f - comm.rank()),
                                float_to_bf16(0.5f * comm.rank())};
  comm.all_reduce(u16_tensor(bf16, DType::bf16), ReduceOp::max);
  EXPECT_EQ(bf16_to_float(bf16[0]), -1.0f);
  EXPECT_EQ(bf16_to_float(bf16[1]), 0.5f * last);

  std::vector<uint16_t> f16 = {float_to_f16(-2.0f + comm.rank())};
  auto handle = comm.all_reduce_async(u16_tensor(f16, DType::f16), ReduceOp::max);
  handle->wait();
  EXPECT_EQ(f16_to_float(f16[0]), -2.0f + last);
}

TEST(MpiCollectives, ReduceScatterGivesEachRankItsSlice) {
  Communicator& comm = world();
  const int p = comm.size();
  for (int64_t slice : {1, 5, 40000}) {
    std::vector<float> in(slice * p);
    for (int64_t i = 0; i < slice * p; ++i) in[i] = exact_value(comm.rank(), i);
    std::vector<float> sum(slice), max(slice), async_sum(slice);
    comm.reduce_scatter(f32_tensor(in), f32_tensor(sum));
    comm.reduce_scatter(f32_tensor(in), f32_tensor(max), ReduceOp::max);
    comm.reduce_scatter_async(f32_tensor(in), f32_tensor(async_sum), ReduceOp::sum)->wait();
    int wrong = 0;
    for (int64_t j = 0; j < slice; ++j) {
      const int64_t i = comm.rank() * slice + j;
      float expected_sum = 0.0f, expected_max = -1e30f;
      for (int r = 0; r < p; ++r) {
        expected_sum += exact_value(r, i);
        expected_max = std::max(expected_max, exact_value(r, i));
      }
      wrong += sum[j] != expected_sum || max[j] != expected_max || async_sum[j] != expected_sum;
    }
    EXPECT_EQ(wrong, 0) << slice << " elements per rank";
  }
}

TEST(MpiCollectives, AllGatherConcatenatesInRankOrder) {
  Communicator& comm = world();
  const int p = comm.size();
  const int64_t n = 1001;
  std::vector<float> mine(n);
  for (int64_t i = 0; i < n; ++i) mine[i] = exact_value(comm.rank(), i);
  std::vector<float> gathered(n * p, 0.0f), async_gathered(n * p, 0.0f);
  comm.all_gather(f32_tensor(mine), f32_tensor(gathered));
  auto handle = comm.all_gather_async(f32_tensor(mine), f32_tensor(async_gathered));
  handle->wait();
  // In place: this rank's input already sits in its slice of the output.
  std::vector<float> in_place(n * p, -1.0f);
  std::memcpy(in_place.data() + comm.rank() * n, mine.data(), n * sizeof(float));
  const Tensor whole = f32_tensor(in_place);
  comm.all_gather(whole.flat(comm.rank() * n, n), whole);
  int wrong = 0;
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const float expected = exact_value(r, i);
      wrong += gathered[r * n + i] != expected || async_gathered[r * n + i] != expected ||
               in_place[r * n + i] != expected;
    }
  EXPECT_EQ(wrong, 0);
}

TEST(MpiCollectives, BroadcastFromEveryRoot) {
  Communicator& comm = world();
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<uint16_t> values(300);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = float_to_bf16(comm.rank() == root ? wide_value(root, i) : 0.0f);
    comm.broadcast(u16_tensor(values, DType::bf16), root);
    int wrong = 0;
    for (size_t i = 0; i < values.size(); ++i)
      wrong += values[i] != float_to_bf16(wide_value(root, i));
    EXPECT_EQ(wrong, 0) << "root " << root;
  }
  comm.barrier();
}

// Every rank starts its send to the next rank and its receive from the previous one before
// waiting on either (the ring exchange of context parallelism): no deadlock, payloads arrive
// intact, a second round on the same handles' buffers keeps start order, and the counting
// communicator counts both directions.
TEST(MpiCollectives, AsyncRingExchangeDeliversInStartOrder) {
  Communicator& comm = world();
  const int rank = comm.rank(), size = comm.size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  CountingCommunicator counted(comm.split(0, rank), "ring");
  std::vector<float> first(1000), second(10), got_first(1000), got_second(10);
  for (int64_t i = 0; i < 1000; ++i) first[i] = exact_value(rank, i);
  for (int64_t i = 0; i < 10; ++i) second[i] = exact_value(rank, i + 5000);
  auto recv_first = counted.recv_async(f32_tensor(got_first), prev);
  auto recv_second = counted.recv_async(f32_tensor(got_second), prev);
  auto send_first = counted.send_async(f32_tensor(first), next);
  auto send_second = counted.send_async(f32_tensor(second), next);
  recv_second->wait();
  recv_first->wait();
  send_first->wait();
  send_second->wait();
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(got_first[i], exact_value(prev, i));
  for (int64_t i = 0; i < 10; ++i) ASSERT_EQ(got_second[i], exact_value(prev, i + 5000));
  EXPECT_EQ(counted.bytes(), 2 * 1010 * 4);
  std::vector<float> too_small(5);
  auto send_again = counted.send_async(f32_tensor(second), next);
  EXPECT_THROW(counted.recv_async(f32_tensor(too_small), prev)->wait(), Error);
  send_again->wait();
}

TEST(MpiCollectives, BadArgumentsFailOnEveryRankBeforeAnyMessage) {
  Communicator& comm = world();
  std::vector<float> in(comm.size() * 3), out(2);
  EXPECT_THROW(comm.reduce_scatter(f32_tensor(in), f32_tensor(out)), Error);
  EXPECT_THROW(comm.all_gather(f32_tensor(out), f32_tensor(in)), Error);
  EXPECT_THROW(comm.broadcast(f32_tensor(out), comm.size()), Error);
  EXPECT_THROW(comm.send(f32_tensor(out), -1), Error);
  EXPECT_THROW(comm.split(-1, 0), Error);
  comm.barrier();  // still in step with the other ranks
}

TEST(MpiCollectives, MpiCheckReportsTheCallAndMpisReason) {
  try {
    MPI_CHECK(MPI_Barrier(MPI_COMM_NULL));
    ADD_FAILURE() << "MPI_Barrier on MPI_COMM_NULL succeeded";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("[mpi] MPI_Barrier failed: ", 0), 0u) << message;
    EXPECT_NE(message.find("MPI_ERR_COMM"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace anvil
