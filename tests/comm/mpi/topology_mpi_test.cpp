// Point to point, split and overlap: a ring of send/recv (small and rendezvous-sized
// messages), splitting the world into groups with key order, collectives inside the groups,
// and async collectives overlapped with computation and polled with test().
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mpi_test_util.h"

namespace anvil {
namespace {

using namespace testing_mpi;

TEST(MpiPointToPoint, RingPassesEveryRanksData) {
  Communicator& comm = world();
  const int p = comm.size();
  const int next = (comm.rank() + 1) % p;
  const int previous = (comm.rank() + p - 1) % p;
  for (int64_t count : {3, 1 << 20}) {  // eager and rendezvous protocols
    std::vector<float> outgoing(count), incoming(count, 0.0f);
    for (int64_t i = 0; i < count; ++i) outgoing[i] = exact_value(comm.rank(), i);
    // Even ranks send first and odd ranks receive first, so blocking sends cannot deadlock.
    if (comm.rank() % 2 == 0) {
      comm.send(f32_tensor(outgoing), next);
      comm.recv(f32_tensor(incoming), previous);
    } else {
      comm.recv(f32_tensor(incoming), previous);
      comm.send(f32_tensor(outgoing), next);
    }
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) wrong += incoming[i] != exact_value(previous, i);
    EXPECT_EQ(wrong, 0) << count << " elements";
  }
}

TEST(MpiPointToPoint, SizeMismatchIsAnError) {
  Communicator& comm = world();
  if (comm.rank() > 1) return;
  std::vector<float> four(4, 1.0f), six(6, 0.0f), two(2, 0.0f);
  if (comm.rank() == 0) {
    comm.send(f32_tensor(four), 1);
    comm.send(f32_tensor(four), 1);
  } else {
    try {
      comm.recv(f32_tensor(six), 0);  // shorter message than expected
      ADD_FAILURE() << "short message accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected 6 f32 elements but the message held 4"),
                std::string::npos)
          << e.what();
    }
    try {
      comm.recv(f32_tensor(two), 0);  // longer message than the buffer
      ADD_FAILURE() << "truncated message accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[mpi] MPI_Recv failed: ", 0), 0u) << e.what();
    }
  }
}

TEST(MpiSplit, GroupsFollowColorThenKey) {
  Communicator& comm = world();
  const int p = comm.size();
  // Two groups by parity; key = -rank reverses the order inside each group.
  auto group = comm.split(comm.rank() % 2, -comm.rank());
  std::vector<int32_t> members;
  for (int r = p - 1; r >= 0; --r)
    if (r % 2 == comm.rank() % 2) members.push_back(r);
  ASSERT_EQ(group->size(), static_cast<int>(members.size()));
  std::vector<int32_t> gathered(members.size(), -1);
  int32_t mine = comm.rank();
  group->all_gather(Tensor(&mine, DType::i32, Shape{1}),
                    Tensor(gathered.data(), DType::i32, Shape{group->size()}));
  EXPECT_EQ(gathered, members);
  EXPECT_EQ(members[group->rank()], comm.rank());

  std::vector<float> value = {static_cast<float>(comm.rank())};
  group->all_reduce(f32_tensor(value), ReduceOp::ordered_sum);
  float expected = 0.0f;
  for (int32_t r : members) expected += static_cast<float>(r);
  EXPECT_EQ(value[0], expected);
}

TEST(MpiSplit, MeshRowsAndColumns) {
  // The world as rows x 2 (2x2 with four ranks): row groups and column groups, then a
  // collective on each axis, as the parallel layer's dp x fsdp mesh does.
  Communicator& comm = world();
  const int p = comm.size();
  if (p % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const int row = comm.rank() / 2, column = comm.rank() % 2;
  auto row_group = comm.split(row, column);
  auto column_group = comm.split(column, row);
  EXPECT_EQ(row_group->size(), 2);
  EXPECT_EQ(row_group->rank(), column);
  EXPECT_EQ(column_group->size(), p / 2);
  EXPECT_EQ(column_group->rank(), row);

  std::vector<int32_t> row_sum = {comm.rank()}, column_sum = {comm.rank()};
  row_group->all_reduce(Tensor(row_sum.data(), DType::i32, Shape{1}), ReduceOp::sum);
  column_group->all_reduce(Tensor(column_sum.data(), DType::i32, Shape{1}), ReduceOp::sum);
  EXPECT_EQ(row_sum[0], 4 * row + 1);
  int32_t expected_column = 0;
  for (int r = column; r < p; r += 2) expected_column += r;
  EXPECT_EQ(column_sum[0], expected_column);

  auto nested = row_group->split(0, -row_group->rank());
  EXPECT_EQ(nested->rank(), 1 - column);
  std::vector<int32_t> root_value = {comm.rank()};
  nested->broadcast(Tensor(root_value.data(), DType::i32, Shape{1}), 0);
  EXPECT_EQ(root_value[0], 2 * row + 1);
}

TEST(MpiAsync, CollectivesOverlapWithComputation) {
  Communicator& comm = world();
  const int p = comm.size();
  const int64_t count = 1 << 18;
  std::vector<float> summed(count), ordered = std::vector<float>(count);
  for (int64_t i = 0; i < count; ++i) {
    summed[i] = exact_value(comm.rank(), i);
    ordered[i] = wide_value(comm.rank(), i, 7);
  }
  std::vector<float> shard(1000, static_cast<float>(comm.rank())), gathered(1000 * p);
  auto sum_handle = comm.all_reduce_async(f32_tensor(summed), ReduceOp::sum);
  auto ordered_handle = comm.all_reduce_async(f32_tensor(ordered), ReduceOp::ordered_sum);
  auto gather_handle = comm.all_gather_async(f32_tensor(shard), f32_tensor(gathered));

  // Unrelated work while the messages move; test() lets the library progress them.
  double work = 0.0;
  bool all_done = false;
  for (int step = 0; step < 200 && !all_done; ++step) {
    for (int i = 0; i < 20000; ++i) work += std::sin(i * 1e-3 + step);
    all_done = sum_handle->test() & ordered_handle->test() & gather_handle->test();
  }
  EXPECT_TRUE(std::isfinite(work));
  sum_handle->wait();
  ordered_handle->wait();
  gather_handle->wait();

  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    float expected_sum = 0.0f, expected_ordered = wide_value(0, i, 7);
    for (int r = 0; r < p; ++r) expected_sum += exact_value(r, i);
    for (int r = 1; r < p; ++r) expected_ordered += wide_value(r, i, 7);
    wrong += summed[i] != expected_sum || bits(ordered[i]) != bits(expected_ordered);
  }
  EXPECT_EQ(wrong, 0);
  for (int r = 0; r < p; ++r) EXPECT_EQ(gathered[r * 1000 + 999], static_cast<float>(r));
}

TEST(MpiAsync, DroppedHandleFinishesItsCollective) {
  Communicator& comm = world();
  std::vector<float> values(257, 1.0f);
  {
    auto handle = comm.all_reduce_async(f32_tensor(values), ReduceOp::ordered_sum);
  }  // destroying the handle waits; the buffer is then safe to read
  for (float v : values) ASSERT_EQ(v, static_cast<float>(comm.size()));
}

}  // namespace
}  // namespace anvil
