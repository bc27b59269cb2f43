// The simulated device: its results equal the optimized CPU backend's bit for bit, a host
// dereference of its memory faults, its capacity is enforced with a clear message, and its ops
// run asynchronously (a held stream shows work queued behind it; a read through copy_to_host
// sees the completed result). The op tables run on it through the conformance driver.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <future>
#include <vector>

#include "backend/registry.h"
#include "backend/sim/sim_backend.h"
#include "core/error.h"
#include "error_message.h"

namespace anvil {
namespace {

using test::error_message;

// Runs a small forward/backward chain on a backend and returns every output's bytes.
std::vector<uint8_t> run_chain(Backend& be) {
  const int64_t N = 12, C = 32, V = 50, F = 24;
  std::vector<float> x(N * C), w(C), table(V * C), up(C * F), head(C * V);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0f + 0.01f * static_cast<float>(i);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>((i * 13) % 29) / 29.0f;
  for (size_t i = 0; i < up.size(); ++i) up[i] = static_cast<float>((i * 7) % 17) / 17.0f - 0.5f;
  for (size_t i = 0; i < head.size(); ++i) head[i] = static_cast<float>((i * 5) % 23) / 23.0f;
  std::vector<int32_t> ids(N), targets(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 11) % V);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 3 + 1) % V);

  std::vector<Buffer> buffers;
  auto tensor = [&](DType dtype, Shape shape) {
    buffers.emplace_back(be, static_cast<size_t>(shape.numel()) * dtype_size(dtype),
                         MemoryCategory::workspace);
    return buffers.back().as(dtype, shape);
  };
  buffers.reserve(16);
  const Tensor t_table = tensor(DType::f32, Shape{V, C}), t_ids = tensor(DType::i32, Shape{N});
  const Tensor t_x = tensor(DType::f32, Shape{N, C}), t_w = tensor(DType::f32, Shape{C});
  const Tensor t_norm = tensor(DType::f32, Shape{N, C}), t_rstd = tensor(DType::f32, Shape{N});
  const Tensor t_up = tensor(DType::f32, Shape{C, F}), t_h = tensor(DType::bf16, Shape{N, F});
  const Tensor t_head = tensor(DType::f32, Shape{C, V}), t_logits = tensor(DType::f32, Shape{N, V});
  const Tensor t_targets = tensor(DType::i32, Shape{N}), t_losses = tensor(DType::f32, Shape{N});
  be.copy_from_host(t_table, table.data());
  be.copy_from_host(t_ids, ids.data());
  be.copy_from_host(t_w, w.data());
  be.copy_from_host(t_up, up.data());
  be.copy_from_host(t_head, head.data());
  be.copy_from_host(t_targets, targets.data());
  be.embedding_forward(t_ids, t_table, t_x);
  be.axpy(0.5f, t_x, t_x);
  be.rmsnorm_forward(t_x, t_w, t_norm, t_rstd, 1e-5f);
  const Tensor t_hf = tensor(DType::f32, Shape{N, F});
  be.matmul(t_norm, t_up, t_hf, false, false);
  be.cast(t_hf, t_h);
  be.matmul(t_norm, t_head, t_logits, false, false);
  be.cross_entropy(t_logits, t_targets, nullptr, -100, t_losses, &t_logits, 1.0f / N);
  const double norm = be.sum_squares(t_logits);

  std::vector<uint8_t> bytes;
  for (const Tensor& t : {t_x, t_norm, t_rstd, t_h, t_logits, t_losses}) {
    std::vector<uint8_t> host(t.nbytes());
    be.copy_to_host(host.data(), t);
    bytes.insert(bytes.end(), host.begin(), host.end());
  }
  const uint8_t* norm_bytes = reinterpret_cast<const uint8_t*>(&norm);
  bytes.insert(bytes.end(), norm_bytes, norm_bytes + sizeof(norm));
  return bytes;
}

TEST(SimBackend, IsRegisteredAndMatchesTheCpuBackendBitForBit) {
  const std::unique_ptr<Backend> sim = make_backend("sim");
  const std::unique_ptr<Backend> cpu = make_backend("cpu");
  EXPECT_EQ(sim->device().type, DeviceType::sim);
  EXPECT_EQ(run_chain(*sim), run_chain(*cpu));
}

TEST(SimBackend, HostReadOfDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        SimBackend sim(1 << 20);
        Buffer buffer(sim, 64, MemoryCategory::workspace);
        const std::vector<float> host(16, 1.0f);
        sim.copy_from_host(buffer.as(DType::f32, Shape{16}), host.data());
        sim.synchronize();
        volatile const float* device = static_cast<const float*>(buffer.data());
        std::fprintf(stderr, "read %f\n", static_cast<double>(device[0]));
        std::exit(0);  // reached only if the read did not fault
      },
      testing::KilledBySignal(SIGSEGV), "");
}

TEST(SimBackend, CapacityIsEnforcedWithAClearMessage) {
  SimBackend sim(1 << 20);
  Buffer first(sim, 768 << 10, MemoryCategory::workspace);
  const std::string message =
      error_message([&] { Buffer second(sim, 512 << 10, MemoryCategory::workspace); });
  EXPECT_EQ(message, "[sim] out of device memory allocating 524288 bytes (786432 of 1048576 in use)");
  first.reset();
  // Freed blocks coalesce.
  EXPECT_NO_THROW(Buffer again(sim, 1 << 20, MemoryCategory::workspace));
  EXPECT_EQ(sim::parse_byte_size("512MiB", "X"), size_t{512} << 20);
  EXPECT_EQ(sim::parse_byte_size("2GiB", "X"), size_t{2} << 30);
  EXPECT_EQ(sim::parse_byte_size("4096", "X"), 4096u);
  EXPECT_EQ(error_message([] { sim::parse_byte_size("2GB", "ANVIL_SIM_MEMORY"); }),
            "[sim] ANVIL_SIM_MEMORY must be a size like 512MiB or 2GiB (units B, KiB, MiB, GiB, "
            "TiB), got '2GB'");
}

TEST(SimBackend, OpsReturnBeforeTheyRunAndCopiesSeeTheResult) {
  SimBackend sim(1 << 20);
  Buffer buffer(sim, 4 * sizeof(float), MemoryCategory::workspace);
  const Tensor t = buffer.as(DType::f32, Shape{4});
  std::vector<float> host = {1.0f, 2.0f, 3.0f, 4.0f};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  sim.enqueue_for_test([released] { released.wait(); });  // holds the stream
  sim.copy_from_host(t, host.data());
  host.assign(4, -1.0f);  // the upload was staged: reusing the host buffer is safe
  sim.scale(t, 2.0f);
  // The worker is blocked, so neither the upload nor the scale can have run yet.
  EXPECT_EQ(sim.pending_for_test(), 3u);
  release.set_value();
  sim.copy_to_host(host.data(), t);  // waits for the queued work
  EXPECT_EQ(host, (std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f}));
  EXPECT_EQ(sim.pending_for_test(), 0u);
}

// A copy stream: gradients leave for the host behind the compute that produced them, and
// weights come back before the compute that reads them, ordered by events alone.
TEST(SimBackend, StreamCopiesAreOrderedByEvents) {
  SimBackend sim(1 << 20);
  Buffer buffer(sim, 4 * sizeof(float), MemoryCategory::workspace);
  const Tensor t = buffer.as(DType::f32, Shape{4});
  std::vector<float> host = {1.0f, 2.0f, 3.0f, 4.0f};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  sim.enqueue_for_test([released] { released.wait(); });  // holds the compute stream
  sim.copy_from_host(t, host.data());
  sim.scale(t, 2.0f);
  std::unique_ptr<Stream> copies = sim.create_stream();
  copies->wait_event(*sim.record_event());
  std::vector<float> down(4, -1.0f);
  copies->copy_to_host(down.data(), t);
  const std::vector<float> up = {10.0f, 20.0f, 30.0f, 40.0f};
  copies->copy_from_host(t, up.data());
  std::unique_ptr<Event> uploaded = copies->record_event();
  sim.wait_event(*uploaded);
  sim.scale(t, 3.0f);
  EXPECT_FALSE(uploaded->done());  // the compute stream is still held
  release.set_value();
  copies->synchronize();
  EXPECT_EQ(down, (std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f}));
  sim.copy_to_host(host.data(), t);
  EXPECT_EQ(host, (std::vector<float>{30.0f, 60.0f, 90.0f, 120.0f}));
}

TEST(SimBackend, KernelFailuresSurfaceAtTheNextSynchronisation) {
  SimBackend sim(1 << 20);
  sim.enqueue_for_test([] { ANVIL_FAIL("[test] kernel failed"); });
  EXPECT_EQ(error_message([&] { sim.synchronize(); }), "[test] kernel failed");
  EXPECT_NO_THROW(sim.synchronize());  // reported once
}

TEST(SimBackend, CountsEveryBlockingWaitAndTheBytesReadBack) {
  SimBackend sim(1 << 20);
  Buffer buffer(sim, 64 * sizeof(float), MemoryCategory::workspace);
  const Tensor t = buffer.as(DType::f32, Shape{64});
  const HostWaits before = sim.host_waits();
  sim.fill_zero(t);
  sim.scale(t, 2.0f);
  EXPECT_EQ((sim.host_waits() - before).waits, 0) << "queued ops never wait";
  std::vector<float> host(64);
  sim.copy_to_host(host.data(), t);
  sim.synchronize();
  (void)sim.sum_squares(t);
  const HostWaits after = sim.host_waits() - before;
  EXPECT_EQ(after.waits, 3);
  EXPECT_EQ(after.readback_bytes, int64_t{64 * sizeof(float)} + int64_t{sizeof(double)});
}

}  // namespace
}  // namespace anvil
