// Planning against a sharded run under mpirun: on every rank, planned_rank_memory
// equals the engine's memory report, and planned_collectives' payload bytes per axis equal
// what the mesh's counting communicators count in a step: exactly for the gradient and weight
// collectives (data, dp, fsdp), within 2% for the model's tensor- and context-parallel
// exchanges (estimated from the block structure).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "parallel/engine_plan.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Harness;
using ptest::RunSpec;

struct PlanCase {
  std::string name;
  RunSpec spec;
  int world = 0;  // 0: any size
};

std::vector<PlanCase> plan_cases() {
  std::vector<PlanCase> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    RunSpec spec;
    spec.zero_stage = stage;
    spec.grad_accum = stage == 1 ? 1 : 2;
    cases.push_back({"stage " + std::to_string(stage), spec});
  }
  RunSpec untied;
  untied.zero_stage = 3;
  untied.tied = false;
  untied.grad_accum = 3;
  cases.push_back({"stage 3 untied", untied});
  RunSpec lora;
  lora.zero_stage = 3;
  lora.lora_r = 4;
  lora.dtype = DType::bf16;
  lora.grad_accum = 2;
  cases.push_back({"stage 3 LoRA bf16 base", lora});
  RunSpec bf16 = untied;  // the layers gathered in bf16 with packed f32 norms
  bf16.dtype = DType::bf16;
  cases.push_back({"stage 3 untied bf16", bf16});
  RunSpec deep = bf16;
  deep.tied = true;
  deep.prefetch = 2;
  deep.grad_accum = 1;
  cases.push_back({"stage 3 tied bf16, prefetch 2", deep});
  RunSpec offload = bf16;  // the device keeps its bf16 shard; masters and gradients go up
  offload.offload = true;
  cases.push_back({"stage 3 untied bf16, offload", offload});
  RunSpec offload_tied = deep;
  offload_tied.offload = true;
  offload_tied.grad_accum = 2;
  cases.push_back({"stage 3 tied bf16, prefetch 2, offload", offload_tied});
  RunSpec kept = bf16;  // every layer keeps its slot from its forward to the end of the step
  kept.reshard_after_forward = false;
  cases.push_back({"stage 3 untied bf16, kept gathered", kept});
  RunSpec kept_tied_offload = offload_tied;
  kept_tied_offload.reshard_after_forward = false;
  cases.push_back({"stage 3 tied bf16, prefetch 2, offload, kept gathered", kept_tied_offload});
  RunSpec params_offloaded = offload;  // the bf16 shard in host memory too
  params_offloaded.offload_params = true;
  cases.push_back({"stage 3 untied bf16, parameter offload", params_offloaded});
  RunSpec params_offloaded_tied = offload_tied;
  params_offloaded_tied.offload_params = true;
  params_offloaded_tied.dtype = DType::f32;
  cases.push_back({"stage 3 tied f32, prefetch 2, parameter offload", params_offloaded_tied});
  RunSpec stage1_bf16;  // the replica in bf16 beside an f32 master shard
  stage1_bf16.zero_stage = 1;
  stage1_bf16.dtype = DType::bf16;
  stage1_bf16.grad_accum = 2;
  cases.push_back({"stage 1 tied bf16", stage1_bf16});
  RunSpec stage2_bf16 = stage1_bf16;
  stage2_bf16.zero_stage = 2;
  stage2_bf16.tied = false;
  stage2_bf16.offload = true;
  cases.push_back({"stage 2 untied bf16, offload", stage2_bf16});
  RunSpec offload_stage1;
  offload_stage1.zero_stage = 1;
  offload_stage1.offload = true;
  cases.push_back({"stage 1, offload", offload_stage1});
  RunSpec hybrid;
  hybrid.zero_stage = 3;
  hybrid.dp = 2;
  hybrid.fsdp = 2;
  hybrid.grad_accum = 2;
  cases.push_back({"stage 3 dp 2 x fsdp 2", hybrid, 4});
  RunSpec hybrid_offload = hybrid;
  hybrid_offload.dtype = DType::bf16;
  hybrid_offload.offload = true;
  cases.push_back({"stage 3 dp 2 x fsdp 2, bf16, offload", hybrid_offload, 4});
  RunSpec tp;
  tp.tp = 2;
  tp.zero_stage = 1;
  cases.push_back({"tp 2", tp});
  RunSpec sp = tp;
  sp.sequence_parallel = true;
  sp.activation_checkpointing = true;
  cases.push_back({"tp 2 sequence parallel, checkpointing", sp});
  RunSpec cp;
  cp.cp = 2;
  cp.zero_stage = 2;
  cases.push_back({"cp 2", cp});
  // Fast reductions: no running sums, stage 1 reduces once per step, bf16 halves the payload
  // and adds cast buffers (and scratch beside the gradient slots under stage 3).
  for (const int stage : {1, 3}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      RunSpec fast;
      fast.zero_stage = stage;
      fast.grad_accum = 2;
      fast.reduce = ReduceMode::fast;
      fast.reduce_dtype = dtype;
      cases.push_back({"stage " + std::to_string(stage) + " fast " +
                           std::string(dtype_name(dtype)) + " reduce",
                       fast});
    }
  }
  RunSpec hybrid_fast = hybrid;
  hybrid_fast.reduce = ReduceMode::fast;
  hybrid_fast.reduce_dtype = DType::bf16;
  cases.push_back({"stage 3 dp 2 x fsdp 2, fast bf16 reduce", hybrid_fast, 4});
  RunSpec offload_fast = offload;  // stage 3 bf16, offloaded, fast bf16 reduce
  offload_fast.reduce = ReduceMode::fast;
  offload_fast.reduce_dtype = DType::bf16;
  offload_fast.grad_accum = 2;
  cases.push_back({"stage 3 untied bf16, offload, fast bf16 reduce", offload_fast});
  return cases;
}

// Returns |a - b| <= tolerance * b.
bool near(int64_t a, int64_t b, double tolerance) {
  return std::abs(static_cast<double>(a - b)) <= tolerance * static_cast<double>(b);
}

TEST(EnginePlanMpi, PlannedMemoryAndTrafficMatchTheRun) {
  Communicator& world = anvil::world();
  for (const PlanCase& c : plan_cases()) {
    if (c.world > 0 && c.world != world.size()) continue;
    SCOPED_TRACE(c.name);
    Harness harness(world, c.spec);
    ptest::expect_planned_memory(harness, c.spec);
    harness.init(c.spec.seed);
    harness.step(0);
    const MeshTraffic before = harness.mesh().traffic();
    harness.step(1);
    const MeshTraffic after = harness.mesh().traffic();
    const MeshTraffic planned = ptest::planned_traffic(harness, c.spec);
    EXPECT_EQ(planned.data, after.data - before.data);
    EXPECT_EQ(planned.dp, after.dp - before.dp);
    EXPECT_EQ(planned.fsdp, after.fsdp - before.fsdp);
    EXPECT_TRUE(near(planned.tp, after.tp - before.tp, 0.02))
        << "tp: planned " << planned.tp << ", counted " << after.tp - before.tp;
    EXPECT_TRUE(near(planned.cp, after.cp - before.cp, 0.02))
        << "cp: planned " << planned.cp << ", counted " << after.cp - before.cp;
  }
}

}  // namespace
}  // namespace anvil
