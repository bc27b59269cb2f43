// The device communicator of the simulated device (comm/stream_communicator.h) on several
// ranks: its collectives give the host communicator's results bit for bit, run on the device
// memory without one copy through the host (the backend counts its host transfers) with the
// ordered sums' staging in device memory, and are ordered after the compute issued before
// them (a held compute stream holds the collective back). Also the Backend's events and
// streams on sim: work queued after wait_event sees what the awaited work wrote.
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "backend/sim/sim_backend.h"
#include "comm/communicator.h"
#include "comm/device_communicator.h"
#include "mpi_test_util.h"

namespace anvil {
namespace {

using testing_mpi::wide_value;

TEST(SimStreams, WorkAfterWaitEventSeesTheResult) {
  SimBackend sim(1 << 20);
  Buffer buffer(sim, 4 * sizeof(float), MemoryCategory::workspace);
  const Tensor t = buffer.as(DType::f32, Shape{4});
  std::vector<float> host = {1, 2, 3, 4};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  sim.enqueue_for_test([released] { released.wait(); });  // holds the compute stream
  sim.copy_from_host(t, host.data());
  sim.scale(t, 2.0f);
  std::unique_ptr<Event> computed = sim.record_event();
  EXPECT_FALSE(computed->done());
  // The communication stream waits for the compute, then adds 1 through the host view.
  std::unique_ptr<Stream> comm = sim.create_stream();
  comm->wait_event(*computed);
  const Tensor view = sim.host_view(t);
  comm->enqueue_host([view] {
    for (int i = 0; i < 4; ++i) static_cast<float*>(view.data)[i] += 1.0f;
  });
  std::unique_ptr<Event> communicated = comm->record_event();
  // The compute stream in turn waits for the communication before scaling again.
  sim.wait_event(*communicated);
  sim.scale(t, 10.0f);
  release.set_value();
  sim.copy_to_host(host.data(), t);
  EXPECT_EQ(host, (std::vector<float>{30, 50, 70, 90}));
  EXPECT_TRUE(computed->done());
  EXPECT_TRUE(communicated->done());
}

TEST(SimDeviceCommunicator, CollectivesRunOnDeviceMemoryWithoutHostStaging) {
  Communicator& host = world();
  const int p = host.size(), r = host.rank();
  const int64_t n = 1000;
  SimBackend sim(16 << 20);
  std::unique_ptr<Communicator> device = make_device_communicator(host, sim);
  ASSERT_NE(device, nullptr);
  // Inputs: on the host for the reference, on the device for the device communicator.
  std::vector<float> values(n * p), gathered_in(n);
  for (int64_t i = 0; i < n * p; ++i) values[i] = wide_value(r, i);
  for (int64_t i = 0; i < n; ++i) gathered_in[i] = wide_value(r, i, 7);
  Buffer sum(sim, n * p * sizeof(float), MemoryCategory::communication);
  Buffer scattered(sim, n * sizeof(float), MemoryCategory::communication);
  Buffer gather_in(sim, n * sizeof(float), MemoryCategory::communication);
  Buffer gather_out(sim, n * p * sizeof(float), MemoryCategory::communication);
  const Tensor sum_t = sum.as(DType::f32, Shape{n * p});
  sim.copy_from_host(sum_t, values.data());
  sim.copy_from_host(gather_in.as(DType::f32, Shape{n}), gathered_in.data());
  const size_t transfers = sim.host_transfers_for_test();
  const int64_t staging_before = sim.memory_snapshot().peak[static_cast<size_t>(
      MemoryCategory::communication)];

  // Held compute stream: the collective waits for the scale queued before it.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  sim.enqueue_for_test([released] { released.wait(); });
  sim.scale(sum_t, 0.5f);
  std::unique_ptr<CommHandle> reduce = device->all_reduce_async(sum_t, ReduceOp::ordered_sum);
  EXPECT_FALSE(reduce->test());
  release.set_value();
  reduce->wait();
  device->reduce_scatter(sum_t, scattered.as(DType::f32, Shape{n}), ReduceOp::ordered_sum);
  device->all_gather(gather_in.as(DType::f32, Shape{n}), gather_out.as(DType::f32, Shape{n * p}));
  EXPECT_EQ(sim.host_transfers_for_test(), transfers) << "a collective copied through the host";
  EXPECT_GT(sim.memory_snapshot().peak[static_cast<size_t>(MemoryCategory::communication)],
            staging_before)
      << "the ordered sum's staging should be device memory";

  // The reference: the same collectives by the host communicator on host memory.
  for (float& v : values) v *= 0.5f;
  host.all_reduce(Tensor(values.data(), DType::f32, Shape{n * p}), ReduceOp::ordered_sum);
  std::vector<float> expected_scatter(n), expected_gather(n * p);
  host.reduce_scatter(Tensor(values.data(), DType::f32, Shape{n * p}),
                      Tensor(expected_scatter.data(), DType::f32, Shape{n}),
                      ReduceOp::ordered_sum);
  host.all_gather(Tensor(gathered_in.data(), DType::f32, Shape{n}),
                  Tensor(expected_gather.data(), DType::f32, Shape{n * p}));
  std::vector<float> got_sum(n * p), got_scatter(n), got_gather(n * p);
  sim.copy_to_host(got_sum.data(), sum_t);
  sim.copy_to_host(got_scatter.data(), scattered.as(DType::f32, Shape{n}));
  sim.copy_to_host(got_gather.data(), gather_out.as(DType::f32, Shape{n * p}));
  EXPECT_EQ(got_sum, values);
  EXPECT_EQ(got_scatter, expected_scatter);
  EXPECT_EQ(got_gather, expected_gather);
}

}  // namespace
}  // namespace anvil
