// The training step on a device backend, as the simulated device (sim) measures it: the host
// runs ahead of the device. A steady-state step blocks the host a fixed, small number of times
// (the step's one readback of loss sums and norm counters; at most 3 in all), the same number
// whatever the layers, the vocabulary and grad_accum; it reads back a few hundred bytes however
// large the gradients; it allocates nothing after the first step; and with the device held,
// the host has queued every layer's forward and backward before it first waits. The profile's
// device spans follow the device's order.
#include <gtest/gtest.h>

#include <future>

#include "backend/device_trace.h"
#include "backend/sim/sim_backend.h"
#include "comm/communicator.h"
#include "core/trace.h"
#include "parallel_test_util.h"

namespace anvil::ptest {
namespace {

struct StepCost {
  HostWaits waits;
  int64_t allocations = 0;
};

// Runs two warm-up steps, then returns what the third cost the host.
StepCost steady_step_cost(const RunSpec& spec) {
  const std::unique_ptr<Communicator> comm = make_single_process_communicator();
  Harness harness(*comm, spec);
  harness.init(7);
  harness.step(0);
  harness.step(1);
  Backend& backend = harness.backend();
  const HostWaits waits = backend.host_waits();
  const int64_t allocations = backend.source_allocations();
  harness.step(2);
  return {backend.host_waits() - waits, backend.source_allocations() - allocations};
}

TEST(DeviceStep, WaitsReadbackAndAllocationsDoNotGrowWithTheModel) {
  int64_t first_waits = -1;
  for (const int layers : {2, 4, 8}) {
    for (const int vocab : {2048, 32768}) {
      for (const int grad_accum : {1, 4}) {
        RunSpec spec;
        spec.backend = "sim";
        spec.n_layers = layers;
        spec.vocab_size = vocab;
        spec.grad_accum = grad_accum;
        spec.tied = false;
        const StepCost cost = steady_step_cost(spec);
        std::printf("[device step] sim, %d layers, vocab %d, grad_accum %d: %lld host waits, "
                    "%lld bytes read back, %lld allocations in a steady step\n",
                    layers, vocab, grad_accum, static_cast<long long>(cost.waits.waits),
                    static_cast<long long>(cost.waits.readback_bytes),
                    static_cast<long long>(cost.allocations));
        EXPECT_GE(cost.waits.waits, 1) << "the step reads its loss and norm back";
        EXPECT_LE(cost.waits.waits, 3);
        if (first_waits < 0) first_waits = cost.waits.waits;
        EXPECT_EQ(cost.waits.waits, first_waits) << layers << " layers, vocab " << vocab
                                                  << ", grad_accum " << grad_accum;
        EXPECT_LE(cost.waits.readback_bytes, 64 * 1024);
        EXPECT_EQ(cost.allocations, 0);
      }
    }
  }
}

TEST(DeviceStep, ReadbackStaysSmallForGradientsOverAHundredMegabytes) {
  RunSpec spec;
  spec.backend = "sim";
  spec.n_layers = 4;
  spec.dim = 512;
  spec.ffn_dim = 1376;
  spec.vocab_size = 32768;
  spec.tied = false;
  spec.micro_batch = 1;
  spec.seq = 8;
  // 2 x 32768 x 512 (embedding, head) + 4 x (4 x 512^2 + 3 x 512 x 1376) f32 gradients.
  const int64_t parameters = 2 * int64_t{32768} * 512 + 4 * (4 * 512 * 512 + 3 * 512 * 1376);
  ASSERT_GT(parameters * 4, int64_t{100} << 20);
  const StepCost cost = steady_step_cost(spec);
  std::printf("[device step] sim, %.0f MB of f32 gradients: %lld host waits, %lld bytes read "
              "back per step\n",
              static_cast<double>(parameters * 4) / 1e6, static_cast<long long>(cost.waits.waits),
              static_cast<long long>(cost.waits.readback_bytes));
  EXPECT_LE(cost.waits.waits, 3);
  EXPECT_LE(cost.waits.readback_bytes, 64 * 1024);
  EXPECT_EQ(cost.allocations, 0);
}

TEST(DeviceStep, TheHostQueuesEveryLayerBeforeItFirstWaits) {
  for (const int grad_accum : {1, 2}) {
    RunSpec spec;
    spec.backend = "sim";
    spec.n_layers = 6;
    spec.grad_accum = grad_accum;
    const std::unique_ptr<Communicator> comm = make_single_process_communicator();
    Harness harness(*comm, spec);
    harness.init(7);
    harness.step(0);
    auto& sim = dynamic_cast<SimBackend&>(harness.backend());
    sim.synchronize();
    // Hold the device: nothing queued from here on runs until the host first has to wait.
    std::promise<void> release;
    std::shared_future<void> held = release.get_future().share();
    sim.enqueue_for_test([held] { held.wait(); });
    const auto [forward0, backward0] = sim.queued_attention_for_test();
    int64_t forward_at_wait = -1, backward_at_wait = -1;
    size_t pending_at_wait = 0;
    sim.set_before_wait_for_test([&] {
      if (forward_at_wait >= 0) return;
      const auto [forward, backward] = sim.queued_attention_for_test();
      forward_at_wait = forward - forward0;
      backward_at_wait = backward - backward0;
      pending_at_wait = sim.pending_for_test();
      release.set_value();
    });
    harness.step(1);
    sim.set_before_wait_for_test(nullptr);
    std::printf("[device step] sim, 6 layers, grad_accum %d: at the host's first wait %lld "
                "attention forwards and %lld backwards were queued, %zu tasks pending\n",
                grad_accum, static_cast<long long>(forward_at_wait),
                static_cast<long long>(backward_at_wait), pending_at_wait);
    EXPECT_EQ(forward_at_wait, 6 * grad_accum);
    EXPECT_EQ(backward_at_wait, 6 * grad_accum);
    EXPECT_GT(pending_at_wait, static_cast<size_t>(12 * grad_accum));
  }
}

// Device time on sim: the profile's device spans come from events the op stream stamps when it
// runs them, so their order is the device's: the layers forward in order, the head, the layers
// backward in reverse, the gradient norm and the optimizer, each span after the one before,
// each attention span inside its layer's.
TEST(DeviceStep, DeviceSpansFollowTheDevicesOrder) {
  RunSpec spec;
  spec.backend = "sim";
  spec.n_layers = 3;
  const std::unique_ptr<Communicator> comm = make_single_process_communicator();
  Harness harness(*comm, spec);
  harness.init(7);
  harness.step(0);
  TraceRecorder& recorder = TraceRecorder::instance();
  recorder.start();
  harness.step(1);
  EXPECT_GT(flush_device_spans(), 0);
  const TraceLog log = recorder.stop();
  std::vector<TraceEvent> outer, attention;
  for (const TraceEvent& e : log.events) {
    if (std::string_view(e.category) != kTraceDevice) continue;
    EXPECT_GE(e.duration_ns, 0) << e.name;
    (e.name.rfind("attention", 0) == 0 ? attention : outer).push_back(e);
  }
  std::vector<std::string> names;
  for (const TraceEvent& e : outer) names.push_back(e.name);
  const std::vector<std::string> want = {
      "forward embedding", "forward layer 0",  "forward layer 1",  "forward layer 2",
      "forward+backward head", "backward layer 2", "backward layer 1", "backward layer 0",
      "backward embedding", "grad norm", "optimizer step"};
  EXPECT_EQ(names, want);
  for (size_t i = 1; i < outer.size(); ++i)
    EXPECT_GE(outer[i].begin_ns, outer[i - 1].begin_ns + outer[i - 1].duration_ns)
        << outer[i].name << " starts before " << outer[i - 1].name << " ends on the device";
  ASSERT_EQ(attention.size(), 6u);  // a forward and a backward per layer
  for (size_t l = 0; l < 3; ++l) {
    const TraceEvent& layer = outer[1 + l];
    const TraceEvent& forward = attention[l];
    EXPECT_EQ(forward.name, "attention forward");
    EXPECT_GE(forward.begin_ns, layer.begin_ns);
    EXPECT_LE(forward.begin_ns + forward.duration_ns, layer.begin_ns + layer.duration_ns);
  }
}

}  // namespace
}  // namespace anvil::ptest
