// The NCCL communicator on one GPU: a one-rank group built from the single-process
// communicator. Checks every collective's result and argument checks, the async handles,
// split, and the host-reduced paths (ordered_sum, max, bf16 sums). Multi-rank NCCL runs need
// one GPU per rank and are left to a multi-GPU machine. Without a device the tests skip with
// the reason, except the one that checks the no-device error.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "comm/device_communicator.h"
#include "core/dtype.h"
#include "core/error.h"

namespace anvil {
namespace {

// Returns "" when a CUDA device is usable, else the reason to skip.
std::string no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

#define SKIP_WITHOUT_DEVICE()                                        \
  do {                                                               \
    const std::string skip_reason = no_device_reason();              \
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;           \
  } while (0)

// Device copy of a host vector; freed on destruction.
template <typename T>
struct DeviceVector {
  T* data = nullptr;
  int64_t count = 0;
  explicit DeviceVector(const std::vector<T>& host) : count(static_cast<int64_t>(host.size())) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceVector() { cudaFree(data); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  Tensor tensor(DType dtype) const {
    return Tensor(data, dtype, Shape{count}, Device{DeviceType::cuda, 0});
  }
  std::vector<T> read() const {
    std::vector<T> host(static_cast<size_t>(count));
    EXPECT_EQ(cudaMemcpy(host.data(), data, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
};

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

TEST_F(NcclOneRank, RejectsBadSizesAndPeers) {
  DeviceVector<float> in(std::vector<float>{1, 2, 3});
  DeviceVector<float> out(std::vector<float>{0, 0});
  EXPECT_THROW(comm_->reduce_scatter(in.tensor(DType::f32), out.tensor(DType::f32)), Error);
  EXPECT_THROW(comm_->broadcast(in.tensor(DType::f32), 1), Error);
  EXPECT_THROW(comm_->send_async(in.tensor(DType::f32), 1), Error);
}

}  // namespace
}  // namespace anvil
