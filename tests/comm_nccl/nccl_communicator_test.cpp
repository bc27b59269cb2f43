// The NCCL communicator on one GPU: a one-rank group built from the single-process
// communicator. Checks every collective's result and argument checks, the async handles,
// split, the device-reduced paths (ordered_sum, max, bf16 sums) and their counted staging
// (rank_order_reduce_test.cpp checks their kernels' bits). Multi-rank NCCL runs need
// one GPU per rank and are left to a multi-GPU machine. Without a device the tests skip with
// the reason, except the one that checks the no-device error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "comm/device_communicator.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace anvil {
namespace {

class NcclOneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    bootstrap_ = make_single_process_communicator();
    comm_ = make_nccl_communicator(*bootstrap_, 0);
  }
  std::unique_ptr<Communicator> bootstrap_;
  std::unique_ptr<Communicator> comm_;
};

TEST(NcclCommunicator, DescribesItself) {
  EXPECT_TRUE(nccl_built());
  EXPECT_EQ(nccl_description().rfind("nccl: built", 0), 0u) << nccl_description();
}

TEST(NcclCommunicator, FailsClearlyWithoutThatDevice) {
  auto bootstrap = make_single_process_communicator();
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  try {
    make_nccl_communicator(*bootstrap, count);  // one past the last device
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[nccl]"), std::string::npos) << e.what();
  }
}

TEST_F(NcclOneRank, SumMaxAndOrderedSumOfOneRankAreTheInput) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  const std::vector<float> values{1.5f, -0.0f, 3.25f, std::numeric_limits<float>::quiet_NaN()};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::ordered_sum}) {
    DeviceVector<float> t(values);
    comm_->all_reduce(t.tensor(DType::f32), op);
    const std::vector<float> got = t.read();
    EXPECT_EQ(got[0], 1.5f) << reduce_op_name(op);
    EXPECT_EQ(got[2], 3.25f) << reduce_op_name(op);
    EXPECT_TRUE(std::isnan(got[3])) << reduce_op_name(op);
  }
}

TEST_F(NcclOneRank, Bf16SumRunsInRankOrderAndKeepsTheBits) {
  const std::vector<uint16_t> values{float_to_bf16(1.0f), float_to_bf16(-2.5f),
                                     float_to_bf16(1e-3f)};
  DeviceVector<uint16_t> t(values);
  comm_->all_reduce(t.tensor(DType::bf16), ReduceOp::sum);
  EXPECT_EQ(t.read(), values);
}

TEST_F(NcclOneRank, ReduceScatterGatherBroadcastAndAsync) {
  DeviceVector<float> in(std::vector<float>{1, 2, 3});
  DeviceVector<float> out(std::vector<float>{0, 0, 0});
  comm_->reduce_scatter(in.tensor(DType::f32), out.tensor(DType::f32), ReduceOp::sum);
  EXPECT_EQ(out.read(), (std::vector<float>{1, 2, 3}));
  DeviceVector<float> ordered(std::vector<float>{0, 0, 0});
  comm_->reduce_scatter_async(in.tensor(DType::f32), ordered.tensor(DType::f32),
                              ReduceOp::ordered_sum)->wait();
  EXPECT_EQ(ordered.read(), (std::vector<float>{1, 2, 3}));

  DeviceVector<int32_t> gathered(std::vector<int32_t>{7, 8});
  comm_->all_gather(gathered.tensor(DType::i32), gathered.tensor(DType::i32));  // in place
  EXPECT_EQ(gathered.read(), (std::vector<int32_t>{7, 8}));
  comm_->broadcast(gathered.tensor(DType::i32), 0);
  EXPECT_EQ(gathered.read(), (std::vector<int32_t>{7, 8}));

  DeviceVector<float> async_sum(std::vector<float>{4, 5});
  auto handle = comm_->all_reduce_async(async_sum.tensor(DType::f32), ReduceOp::sum);
  while (!handle->test()) {
  }
  handle->wait();  // a second completion is a no-op
  EXPECT_EQ(async_sum.read(), (std::vector<float>{4, 5}));
  comm_->barrier();
}

TEST_F(NcclOneRank, SplitGivesAOneRankGroup) {
  auto sub = comm_->split(3, 0);
  EXPECT_EQ(sub->size(), 1);
  DeviceVector<float> t(std::vector<float>{2});
  sub->all_reduce(t.tensor(DType::f32), ReduceOp::sum);
  EXPECT_EQ(t.read(), (std::vector<float>{2}));
  EXPECT_THROW(comm_->split(-1, 0), Error);
}

// The trainer exchanges its flags, counts and memory figures over the same world as the
// device tensors: host tensors travel through device scratch.
TEST_F(NcclOneRank, HostTensorsTravelThroughTheDevice) {
  std::vector<float> host{1, 2};
  comm_->all_reduce(Tensor(host.data(), DType::f32, Shape{2}), ReduceOp::max);
  EXPECT_EQ(host, (std::vector<float>{1, 2}));
  std::vector<uint32_t> words{7, 9};
  std::vector<uint32_t> gathered{0, 0};
  comm_->all_gather(Tensor(words.data(), DType::u32, Shape{2}),
                    Tensor(gathered.data(), DType::u32, Shape{2}));
  EXPECT_EQ(gathered, (std::vector<uint32_t>{7, 9}));
  comm_->all_gather(Tensor(words.data(), DType::u32, Shape{2}),
                    Tensor(words.data(), DType::u32, Shape{2}));  // in place: rank 0's slice
  EXPECT_EQ(words, (std::vector<uint32_t>{7, 9}));
  std::vector<int32_t> flag{3};
  comm_->broadcast(Tensor(flag.data(), DType::i32, Shape{1}), 0);
  EXPECT_EQ(flag, (std::vector<int32_t>{3}));
}

// A ring step on one rank: the send to itself and the receive from itself meet in one group.
TEST_F(NcclOneRank, AsyncSendAndReceivePairUpInOneGroup) {
  DeviceVector<float> block(std::vector<float>{1.5f, -2.0f, 4.0f});
  DeviceVector<float> received(std::vector<float>{0, 0, 0});
  auto send = comm_->send_async(block.tensor(DType::f32), 0);
  auto recv = comm_->recv_async(received.tensor(DType::f32), 0);
  recv->wait();
  send->wait();
  EXPECT_EQ(received.read(), (std::vector<float>{1.5f, -2.0f, 4.0f}));
  // A queued pair is issued by the next collective too, keeping the call order.
  DeviceVector<float> again(std::vector<float>{0, 0, 0});
  auto send2 = comm_->send_async(block.tensor(DType::f32), 0);
  auto recv2 = comm_->recv_async(again.tensor(DType::f32), 0);
  comm_->barrier();
  EXPECT_TRUE(recv2->test());
  send2->wait();
  EXPECT_EQ(again.read(), (std::vector<float>{1.5f, -2.0f, 4.0f}));
}

// Device memory from cudaMalloc, counted: what a backend lends the communicator as staging.
class CountingDeviceAllocator final : public Allocator {
 public:
  Device device() const override { return Device{DeviceType::cuda, 0}; }

 protected:
  void* do_allocate(size_t bytes) override {
    void* data = nullptr;
    EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess);
    return data;
  }
  void do_deallocate(void* ptr, size_t) override { cudaFree(ptr); }
};

// The staging comes from the lent allocator, counted as communication and given back when the
// collective completes: on one rank the exact reductions receive nothing (the kernel reads the
// rank's own row in place), so what is staged is a host tensor's device copy.
TEST_F(NcclOneRank, StagingComesFromTheLentAllocator) {
  CountingDeviceAllocator staging;
  comm_->set_staging_allocator(&staging);
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 500.0f;
  DeviceVector<float> on_device(values);
  comm_->all_reduce(on_device.tensor(DType::f32), ReduceOp::max);
  EXPECT_EQ(on_device.read(), values);
  EXPECT_EQ(staging.memory_snapshot().peak_of(MemoryCategory::communication), 0);
  std::vector<float> on_host = values;
  comm_->all_reduce(Tensor(on_host.data(), DType::f32, Shape{1000}), ReduceOp::max);
  EXPECT_EQ(on_host, values);
  EXPECT_EQ(staging.memory_snapshot().peak_of(MemoryCategory::communication), 4000);
  EXPECT_EQ(staging.memory_snapshot().current_of(MemoryCategory::communication), 0);
  comm_->set_staging_allocator(nullptr);
}

TEST_F(NcclOneRank, RejectsHostStaging) {
  try {
    comm_->set_staging_allocator(&HostAllocator::instance());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("staging memory of that device"), std::string::npos)
        << e.what();
  }
}

TEST_F(NcclOneRank, RejectsBadSizesAndPeers) {
  DeviceVector<float> in(std::vector<float>{1, 2, 3});
  DeviceVector<float> out(std::vector<float>{0, 0});
  EXPECT_THROW(comm_->reduce_scatter(in.tensor(DType::f32), out.tensor(DType::f32)), Error);
  EXPECT_THROW(comm_->broadcast(in.tensor(DType::f32), 1), Error);
  EXPECT_THROW(comm_->send_async(in.tensor(DType::f32), 1), Error);
}

}  // namespace
}  // namespace anvil
