// ReduceOp::ordered_sum across processes: the result must equal, bit for bit, the serial sum
// x0 + x1 + ... + x(p-1) that every rank computes itself from the generator, for sizes that
// leave some ranks with empty chunks or uneven ones, in the blocking and async forms, and be
// byte-identical on every rank. bf16 sums must be the f32 serial sum rounded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "mpi_test_util.h"

namespace anvil {
namespace {

using namespace testing_mpi;

float serial_sum(int ranks, int64_t index, uint64_t salt) {
  float total = wide_value(0, index, salt);
  for (int r = 1; r < ranks; ++r) total += wide_value(r, index, salt);
  return total;
}

// Returns how many elements differ in bits from the serial sum.
int64_t count_mismatches(const std::vector<float>& values, int ranks, uint64_t salt) {
  int64_t wrong = 0;
  for (size_t i = 0; i < values.size(); ++i)
    wrong += bits(values[i]) != bits(serial_sum(ranks, static_cast<int64_t>(i), salt));
  return wrong;
}

// Checks that every rank holds exactly the same bytes.
void expect_identical_on_every_rank(Communicator& comm, std::vector<float>& values) {
  std::vector<float> everyone(values.size() * comm.size());
  comm.all_gather(f32_tensor(values), f32_tensor(everyone));
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_EQ(std::memcmp(everyone.data() + r * values.size(), values.data(),
                          values.size() * sizeof(float)),
              0)
        << "rank " << r << " differs from rank " << comm.rank();
}

std::vector<float> rank_input(int rank, int64_t count, uint64_t salt) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = wide_value(rank, i, salt);
  return values;
}

TEST(MpiOrderedSum, AllReduceEqualsTheSerialSumBitwise) {
  Communicator& comm = world();
  const int p = comm.size();
  for (int64_t count : {int64_t{1}, int64_t{p - 1}, int64_t{p + 1}, int64_t{1001}, int64_t{65537}}) {
    if (count == 0) continue;
    std::vector<float> blocking = rank_input(comm.rank(), count, 1);
    comm.all_reduce(f32_tensor(blocking), ReduceOp::ordered_sum);
    EXPECT_EQ(count_mismatches(blocking, p, 1), 0) << count << " elements";
    expect_identical_on_every_rank(comm, blocking);

    std::vector<float> async = rank_input(comm.rank(), count, 1);
    comm.all_reduce_async(f32_tensor(async), ReduceOp::ordered_sum)->wait();
    EXPECT_EQ(std::memcmp(async.data(), blocking.data(), count * sizeof(float)), 0);
  }
}

TEST(MpiOrderedSum, ReduceScatterEqualsTheSerialSumBitwise) {
  Communicator& comm = world();
  const int p = comm.size();
  for (int64_t slice : {1, 333, 20000}) {
    std::vector<float> in = rank_input(comm.rank(), slice * p, 2);
    std::vector<float> out(slice), async_out(slice);
    comm.reduce_scatter(f32_tensor(in), f32_tensor(out), ReduceOp::ordered_sum);
    auto handle = comm.reduce_scatter_async(f32_tensor(in), f32_tensor(async_out),
                                            ReduceOp::ordered_sum);
    while (!handle->test()) {
    }
    int64_t wrong = 0;
    for (int64_t j = 0; j < slice; ++j) {
      const uint32_t expected = bits(serial_sum(p, comm.rank() * slice + j, 2));
      wrong += bits(out[j]) != expected || bits(async_out[j]) != expected;
    }
    EXPECT_EQ(wrong, 0) << slice << " elements per rank";
  }
}

TEST(MpiOrderedSum, Bf16SumsAccumulateInF32AndRoundOnce) {
  Communicator& comm = world();
  const int p = comm.size();
  const int64_t count = 4099;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::ordered_sum}) {
    std::vector<uint16_t> values(count);
    for (int64_t i = 0; i < count; ++i) values[i] = float_to_bf16(wide_value(comm.rank(), i, 3));
    comm.all_reduce(u16_tensor(values, DType::bf16), op);
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      float total = 0.0f;
      for (int r = 0; r < p; ++r) total += round_to_bf16(wide_value(r, i, 3));
      wrong += values[i] != float_to_bf16(total);
    }
    EXPECT_EQ(wrong, 0) << reduce_op_name(op);
  }
}

TEST(MpiOrderedSum, OutstandingSumsFinishWhicheverIsWaitedFirst) {
  // Several buckets in flight at once, as gradient buckets during backward. Ranks wait on
  // them in different orders: a wait must keep every pending sum moving, or this deadlocks.
  Communicator& comm = world();
  const int p = comm.size();
  const int buckets = 4;
  std::vector<std::vector<float>> data;
  std::vector<std::unique_ptr<CommHandle>> handles;
  for (int b = 0; b < buckets; ++b) data.push_back(rank_input(comm.rank(), 5000 + b, 10 + b));
  for (int b = 0; b < buckets; ++b)
    handles.push_back(comm.all_reduce_async(f32_tensor(data[b]), ReduceOp::ordered_sum));
  for (int k = 0; k < buckets; ++k) {
    const int b = comm.rank() % 2 == 0 ? k : buckets - 1 - k;
    handles[b]->wait();
  }
  for (int b = 0; b < buckets; ++b) EXPECT_EQ(count_mismatches(data[b], p, 10 + b), 0) << b;
}

// Host memory that counts what the ordered sums stage in it.
class CountingStaging final : public Allocator {
 public:
  Device device() const override { return Device{}; }

 protected:
  void* do_allocate(size_t bytes) override { return allocate_host_memory(bytes); }
  void do_deallocate(void* ptr, size_t) override { free_host_memory(ptr); }
};

TEST(MpiOrderedSum, StagesTwoReceiveBuffersWhateverTheWorldSize) {
  // Each rank adds the contributions in rank order as they arrive, so the staging is two
  // receive buffers of one slice (and, for an all-reduce, a copy of the rank's own chunk),
  // not one buffer per rank.
  Communicator& comm = world();
  const int p = comm.size();
  const int64_t slice = 3000;
  CountingStaging staging;
  comm.set_staging_allocator(&staging);
  std::vector<float> in = rank_input(comm.rank(), slice * p, 4);
  std::vector<float> out(slice);
  comm.reduce_scatter(f32_tensor(in), f32_tensor(out), ReduceOp::ordered_sum);
  const int64_t slice_bytes = slice * static_cast<int64_t>(sizeof(float));
  const int64_t receive_buffers = std::min(p - 1, 2) * slice_bytes;
  EXPECT_EQ(staging.memory_snapshot().peak_of(MemoryCategory::communication), receive_buffers);
  staging.reset_memory_peaks();
  comm.all_reduce(f32_tensor(in), ReduceOp::ordered_sum);
  EXPECT_LE(staging.memory_snapshot().peak_of(MemoryCategory::communication),
            receive_buffers + slice_bytes);
  comm.set_staging_allocator(nullptr);
  EXPECT_EQ(count_mismatches(in, p, 4), 0);
}

}  // namespace
}  // namespace anvil
