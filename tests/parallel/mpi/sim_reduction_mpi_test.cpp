// Issue 30 on the simulated device: at every ZeRO stage, exact and fast, the gradient
// reductions (all-reduces, reduce-scatters, running sums, shard assembly), the stage-3 weight
// gathers and the stages 1-2 publishes run on device
// memory without one copy through the host. SimBackend counts every copy between host and
// device; a training step on N ranks must issue exactly the copies the model itself makes for
// the same micro-batches without any engine (token uploads, loss read-back), plus one: the
// gradient norm's digit counters (DataParallelEngine::global_grad_norm adds the squares of
// every group's slice on the device and reads back only those few dozen words), not one
// copy of each group's gradient.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/sim/sim_backend.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Harness;
using ptest::RunSpec;

struct SimCase {
  std::string name;
  RunSpec spec;
};

std::vector<SimCase> sim_cases() {
  std::vector<SimCase> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    RunSpec spec;
    spec.backend = "sim";
    spec.zero_stage = stage;
    spec.grad_accum = 2;  // running sums between the micro-steps too
    cases.push_back({"stage " + std::to_string(stage), spec});
  }
  RunSpec bf16 = cases.back().spec;  // layers gathered in bf16, norms packed in f32
  bf16.dtype = DType::bf16;
  bf16.tied = false;
  cases.push_back({"stage 3 bf16 untied", bf16});
  RunSpec replica = cases[1].spec;  // stage 1 publishes into a bf16 replica
  replica.dtype = DType::bf16;
  cases.push_back({"stage 1 bf16", replica});
  // The library's own sums (parallel.reduce = fast), in f32 and through bf16 casts.
  for (const int stage : {1, 3}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      RunSpec fast = cases[static_cast<size_t>(stage)].spec;
      fast.reduce = ReduceMode::fast;
      fast.reduce_dtype = dtype;
      cases.push_back(
          {"stage " + std::to_string(stage) + " fast " + std::string(dtype_name(dtype)), fast});
    }
  }
  return cases;
}

size_t host_copies(Backend& backend) {
  return dynamic_cast<SimBackend&>(backend).host_transfers_for_test();
}

TEST(SimReductionsMpi, AStepCopiesThroughTheHostOnlyWhatTheModelDoesAndItsResults) {
  Communicator& world = anvil::world();
  for (const SimCase& c : sim_cases()) {
    SCOPED_TRACE(c.name);
    Harness harness(world, c.spec);
    harness.init(c.spec.seed);
    harness.step(0);  // the first use of each shape sets up what later steps reuse
    const size_t before = host_copies(harness.backend());
    const MeshTraffic traffic_before = harness.mesh().traffic();
    harness.step(1);
    const size_t step_copies = host_copies(harness.backend()) - before;
    ASSERT_GT(harness.mesh().traffic().data, traffic_before.data) << "no reduction ran";

    // The same micro-batches through a model of its own on another simulated device, each
    // loss sum left on the device: what the model itself moves is its uploads.
    std::unique_ptr<Backend> device = make_backend("sim");
    LlamaModel bare(c.spec.config(), *device, harness.options());
    const Buffer loss_sum(*device, sizeof(double), MemoryCategory::workspace);
    const Tensor slot = loss_sum.as(DType::u32, Shape{2});
    for (const Batch& batch : harness.micro_batches(0)) bare.forward_backward(batch, 1.0f, slot);
    const size_t bare_before = host_copies(*device);
    for (const Batch& batch : harness.micro_batches(1)) bare.forward_backward(batch, 1.0f, slot);
    const size_t model_copies = host_copies(*device) - bare_before;

    // One read of the step's results: every micro-batch's loss sum and the digit counters,
    // whatever the number of groups and micro-batches.
    const size_t result_copies = 1;
    EXPECT_EQ(step_copies, model_copies + result_copies)
        << "the model copies " << model_copies << ", the step's results " << result_copies;
  }
}

size_t blocking_reads(Backend& backend) {
  return dynamic_cast<SimBackend&>(backend).blocking_reads_for_test();
}

// Stage 3 with optimizer offload: every reduced gradient shard goes to the host, but on the
// engine's copy stream, so backward is never held up waiting for the device to catch up: a
// step reads back on the op stream only what the model itself does and its loss sums (the norm
// then reads the host copies). A copy on the op stream would add one read per group and
// micro-step.
TEST(SimReductionsMpi, OffloadedShardsLeaveOnTheCopyStreamNotTheOpStream) {
  Communicator& world = anvil::world();
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast" : "exact");
    RunSpec spec;
    spec.backend = "sim";
    spec.zero_stage = 3;
    spec.grad_accum = 2;  // exact: the running sum goes back up between the micro-steps
    spec.dtype = DType::bf16;
    spec.offload = true;
    if (fast) spec.reduce = ReduceMode::fast;
    Harness harness(world, spec);
    harness.init(spec.seed);
    harness.step(0);
    const size_t before = blocking_reads(harness.backend());
    harness.step(1);
    const size_t step_reads = blocking_reads(harness.backend()) - before;

    std::unique_ptr<Backend> device = make_backend("sim");
    LlamaModel bare(spec.config(), *device, harness.options());
    const Buffer loss_sum(*device, sizeof(double), MemoryCategory::workspace);
    const Tensor slot = loss_sum.as(DType::u32, Shape{2});
    for (const Batch& batch : harness.micro_batches(0)) bare.forward_backward(batch, 1.0f, slot);
    const size_t bare_before = blocking_reads(*device);
    for (const Batch& batch : harness.micro_batches(1)) bare.forward_backward(batch, 1.0f, slot);
    // The model's own reads, plus the step's one read of its loss sums.
    EXPECT_EQ(step_reads, blocking_reads(*device) - bare_before + 1);
  }
}

}  // namespace
}  // namespace anvil
