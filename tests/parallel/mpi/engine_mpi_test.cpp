// The engine under mpirun: for every ZeRO stage, 20 steps on N ranks give the loss curve,
// gradient norms and final weights of one process that runs the same global batch (micro-batch
// b, grad_accum a * N), bit for bit. Every rank runs that one-process reference itself on a
// single-process communicator, so no second job is needed.
#include <gtest/gtest.h>

#include "parallel/sharding_report.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Curve;
using ptest::describe_memory;
using ptest::expected_setup_memory;
using ptest::Harness;
using ptest::RunSpec;

constexpr int kSteps = 20;

struct MeshCase {
  int stage;
  int grad_accum;  // per rank
  bool tied;
  int dp = 0;  // 0: automatic
  int fsdp = 0;
  int lora_r = 0;  // > 0: LoRA adapters on a frozen base
  DType dtype = DType::f32;
  bool offload = false;  // the distributed run offloads; the reference does not
  bool reshard_after_forward = true;  // stage 3: false keeps every layer gathered
  bool offload_params = false;        // stage 3 with offload: the weight shard on the host
};

std::string describe(const MeshCase& c) {
  return "stage " + std::to_string(c.stage) + ", grad_accum " + std::to_string(c.grad_accum) +
         (c.tied ? ", tied" : ", untied") + ", dp " + std::to_string(c.dp) + ", fsdp " +
         std::to_string(c.fsdp) + ", lora r " + std::to_string(c.lora_r) + ", " +
         std::string(dtype_name(c.dtype)) + (c.offload ? ", offload" : "") +
         (c.reshard_after_forward ? "" : ", kept gathered") +
         (c.offload_params ? ", parameter offload" : "");
}

class DistributedEqualsOneProcess : public ::testing::TestWithParam<MeshCase> {};

TEST_P(DistributedEqualsOneProcess, LossCurveAndWeightsAreBitwiseEqual) {
  const MeshCase c = GetParam();
  Communicator& world = anvil::world();
  if (c.dp * c.fsdp > 0 && c.dp * c.fsdp != world.size()) GTEST_SKIP() << "needs another size";
  RunSpec spec;
  spec.zero_stage = c.stage;
  spec.grad_accum = c.grad_accum;
  spec.tied = c.tied;
  spec.dp = c.dp;
  spec.fsdp = c.fsdp;
  spec.lora_r = c.lora_r;
  spec.dtype = c.dtype;
  spec.offload = c.offload;
  spec.reshard_after_forward = c.reshard_after_forward;
  spec.offload_params = c.offload_params;
  Harness distributed(world, spec);
  distributed.init(spec.seed);
  const Curve got = ptest::run_steps(distributed, 0, kSteps);
  const std::vector<float> got_weights = distributed.all_weights();

  auto single = make_single_process_communicator();
  RunSpec reference_spec = spec;
  reference_spec.zero_stage = 0;
  reference_spec.dp = 0;
  reference_spec.fsdp = 0;
  reference_spec.offload = false;
  reference_spec.reshard_after_forward = true;
  reference_spec.offload_params = false;
  reference_spec.grad_accum = c.grad_accum * world.size();
  Harness reference(*single, reference_spec);
  reference.init(spec.seed);
  const Curve want = ptest::run_steps(reference, 0, kSteps);

  EXPECT_EQ(got.loss_bits, want.loss_bits) << describe(c);
  EXPECT_EQ(got.norm_bits, want.norm_bits) << describe(c);
  EXPECT_TRUE(ptest::same_bits(got_weights, reference.all_weights())) << describe(c);
  EXPECT_NE(got.loss_bits.front(), got.loss_bits.back());

  const LossSum eval_got = distributed.evaluate(5);
  const LossSum eval_want = reference.evaluate(5);
  EXPECT_EQ(ptest::bits(eval_got.sum), ptest::bits(eval_want.sum)) << describe(c);
  EXPECT_EQ(eval_got.count, eval_want.count);
}

INSTANTIATE_TEST_SUITE_P(
    Stages, DistributedEqualsOneProcess,
    ::testing::Values(MeshCase{0, 1, true}, MeshCase{0, 2, false}, MeshCase{1, 1, true},
                      MeshCase{1, 2, true}, MeshCase{2, 1, true}, MeshCase{2, 2, false},
                      MeshCase{3, 1, true}, MeshCase{3, 2, true}, MeshCase{3, 1, false},
                      // Hybrid sharding (dp 2 x fsdp 2) runs with 4 ranks only.
                      MeshCase{1, 1, true, 2, 2}, MeshCase{2, 2, true, 2, 2},
                      MeshCase{3, 2, false, 2, 2}));

// Mixed precision: stage 3 gathers each rank's shard cast to bf16 (norms and the embedding
// table in f32) into transient slots, and stages 1-2 publish the updated shards the same way
// into a bf16 replica; casting is element-wise, so still bit for bit.
INSTANTIATE_TEST_SUITE_P(
    Bf16, DistributedEqualsOneProcess,
    ::testing::Values(MeshCase{1, 1, true, 0, 0, 0, DType::bf16},
                      MeshCase{1, 2, false, 0, 0, 0, DType::bf16},
                      MeshCase{2, 2, true, 0, 0, 0, DType::bf16},
                      MeshCase{2, 1, true, 2, 2, 0, DType::bf16},
                      MeshCase{3, 1, true, 0, 0, 0, DType::bf16},
                      MeshCase{3, 2, false, 0, 0, 0, DType::bf16},
                      MeshCase{2, 1, false, 0, 0, 0, DType::bf16},
                      MeshCase{3, 2, true, 2, 2, 0, DType::bf16}));

// Optimizer offload: the host steps the same f32 values with the same kernel. Under stage 3
// the device holds only the bf16 (or f32) shard the gathers read, and each reduced gradient
// shard goes to the host as its reduction finishes (running sums come back up for
// grad_accum > 1, and hybrid sharding assembles the shard first).
INSTANTIATE_TEST_SUITE_P(
    Offload, DistributedEqualsOneProcess,
    ::testing::Values(MeshCase{1, 2, true, 0, 0, 0, DType::f32, true},
                      MeshCase{2, 2, false, 0, 0, 0, DType::bf16, true},
                      MeshCase{3, 2, false, 0, 0, 0, DType::f32, true},
                      MeshCase{3, 1, true, 0, 0, 0, DType::bf16, true},
                      MeshCase{3, 2, false, 0, 0, 0, DType::bf16, true},
                      MeshCase{3, 2, true, 2, 2, 0, DType::bf16, true},
                      MeshCase{3, 2, false, 0, 0, 4, DType::bf16, true}));

// Parameter offload (DeepSpeed's offload_param) on top: the shard the gathers read is host
// memory, uploaded into the slot before each gather and gathered in place.
INSTANTIATE_TEST_SUITE_P(
    ParameterOffload, DistributedEqualsOneProcess,
    ::testing::Values(MeshCase{3, 2, false, 0, 0, 0, DType::bf16, true, true, true},
                      MeshCase{3, 1, true, 0, 0, 0, DType::f32, true, true, true},
                      MeshCase{3, 2, true, 0, 0, 0, DType::bf16, true, false, true},
                      MeshCase{3, 2, false, 0, 0, 4, DType::bf16, true, true, true},
                      MeshCase{3, 2, true, 2, 2, 0, DType::bf16, true, true, true}));

// Stage 3 without resharding after forward (FSDP2's reshard_after_forward = False): every
// layer stays gathered from its forward to the end of the step, so backward and the later
// micro-batches read the slots the first forward filled; the bits cannot change.
INSTANTIATE_TEST_SUITE_P(
    KeptGathered, DistributedEqualsOneProcess,
    ::testing::Values(MeshCase{3, 2, true, 0, 0, 0, DType::f32, false, false},
                      MeshCase{3, 2, false, 0, 0, 0, DType::bf16, false, false},
                      MeshCase{3, 2, true, 0, 0, 0, DType::bf16, true, false},
                      MeshCase{3, 1, false, 0, 0, 4, DType::bf16, false, false},
                      MeshCase{3, 2, true, 2, 2, 0, DType::bf16, false, false}));

// LoRA on a frozen base (f32, or bf16 in a bf16 model), which ZeRO-3 shards too.
INSTANTIATE_TEST_SUITE_P(
    Lora, DistributedEqualsOneProcess,
    ::testing::Values(MeshCase{3, 1, true, 0, 0, 4}, MeshCase{3, 2, false, 0, 0, 4},
                      MeshCase{1, 2, true, 0, 0, 4}, MeshCase{2, 1, false, 0, 0, 4},
                      MeshCase{3, 1, true, 0, 0, 4, DType::bf16},
                      MeshCase{2, 2, false, 0, 0, 4, DType::bf16},
                      MeshCase{3, 2, true, 2, 2, 4, DType::bf16}));

TEST(DistributedMemory, StageThreeHoldsAboutOneNthOfTheModelState) {
  Communicator& world = anvil::world();
  RunSpec spec;
  Harness replicated(world, spec);
  spec.zero_stage = 3;
  Harness sharded(world, spec);
  const MemorySnapshot full = replicated.engine().memory();
  const MemorySnapshot part = sharded.engine().memory();
  auto state = [](const MemorySnapshot& m) {
    return m.current_of(MemoryCategory::trainable_weights) +
           m.current_of(MemoryCategory::gradients) + m.current_of(MemoryCategory::optimizer_state);
  };
  // Shards are padded to world * 16 elements per group, so allow that much on top of 1/N.
  const int64_t padding = 16 * 4 * world.size() * 4 * sharded.engine().plan().group_count();
  EXPECT_LE(state(part), state(full) / world.size() + padding);
  EXPECT_GE(state(part), state(full) / world.size());
  const ShardingReport report = sharding_report(sharded.engine());
  ASSERT_EQ(report.json["memory_per_rank"].size(), static_cast<size_t>(world.size()));
  EXPECT_EQ(report.json["memory_per_rank"][world.rank()]["optimizer_state"].get<int64_t>(),
            part.current_of(MemoryCategory::optimizer_state));
}

// Every rank's measured bytes after setup equal what the parameter shapes give (stage 0 and
// stage 3), and a step's collectives stage their messages in memory counted as communication
// that is released when the step ends.
TEST(DistributedMemory, MeasuredMemoryEqualsTheBytesOfTheParameterShapes) {
  Communicator& world = anvil::world();
  for (const int stage : {0, 3}) {
    RunSpec spec;
    spec.zero_stage = stage;
    Harness harness(world, spec);
    const MemorySnapshot setup = harness.engine().memory();
    const MemoryByCategory expected =
        expected_setup_memory(spec, harness.model(), world.size(), world.rank());
    EXPECT_EQ(setup.current, expected)
        << "stage " << stage << ", rank " << world.rank() << ": measured "
        << describe_memory(setup.current) << "; expected " << describe_memory(expected);
    harness.engine().init_weights(spec.seed);
    harness.step(0);
    const MemorySnapshot after = harness.engine().memory();
    const int64_t comm = setup.current_of(MemoryCategory::communication);
    EXPECT_EQ(after.current_of(MemoryCategory::communication), comm) << "stage " << stage;
    // The ordered sums (stage 0: all-reduce, stage 3: reduce-scatter) staged the other
    // ranks' copies on top of the slots.
    EXPECT_GT(after.peak_of(MemoryCategory::communication), comm) << "stage " << stage;
  }
}

}  // namespace
}  // namespace anvil
