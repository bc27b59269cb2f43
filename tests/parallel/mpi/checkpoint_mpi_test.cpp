// Sharded checkpoints under mpirun: resuming with the same mesh repeats the uninterrupted run
// bit for bit, and a checkpoint written by stage 3 reloads into stage 1 on the same ranks and
// into a one-process run on each rank (world N -> 1), which then also continue bit for bit,
// because every mesh computes the same serial gradient sum (see parallel/engine.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <tuple>

#include "parallel/sharded_checkpoint.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Curve;
using ptest::Harness;
using ptest::RunSpec;

constexpr int64_t kSaveAt = 8;
constexpr int64_t kSteps = 16;

// Returns a fresh folder every rank can reach (named after rank 0's pid).
std::filesystem::path shared_dir(Communicator& world, const std::string& name) {
  int32_t pid = static_cast<int32_t>(getpid());
  world.broadcast(Tensor(&pid, DType::i32, Shape{1}), 0);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("anvil_parallel_" + std::to_string(pid)) / name;
  if (world.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  world.barrier();
  return dir;
}

void save(Harness& harness, const std::filesystem::path& dir) {
  write_engine_checkpoint(harness.engine(), dir);
  harness.mesh().world().barrier();
}

// (ZeRO stage, compute dtype): in bf16, stages 1-3 keep sharded f32 masters, which a
// checkpoint gathers over the fsdp ranks.
class ResumeWithStage : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(ResumeWithStage, SameMeshResumeIsBitExact) {
  Communicator& world = anvil::world();
  RunSpec spec;
  spec.zero_stage = std::get<0>(GetParam());
  spec.dtype = std::get<1>(GetParam());
  spec.grad_accum = 2;
  const std::filesystem::path dir =
      shared_dir(world, "same-" + std::to_string(spec.zero_stage) + "-" +
                            std::string(dtype_name(spec.dtype)));
  Harness first(world, spec);
  first.engine().init_weights(spec.seed);
  ptest::run_steps(first, 0, kSaveAt);
  save(first, dir);
  const Curve want = ptest::run_steps(first, kSaveAt, kSteps);

  Harness resumed(world, spec);
  read_engine_checkpoint(resumed.engine(), dir);
  EXPECT_EQ(resumed.engine().optimizer_steps(), kSaveAt);
  const Curve got = ptest::run_steps(resumed, kSaveAt, kSteps);
  EXPECT_EQ(got.loss_bits, want.loss_bits);
  EXPECT_TRUE(ptest::same_bits(resumed.all_weights(), first.all_weights()));
}

INSTANTIATE_TEST_SUITE_P(Stages, ResumeWithStage,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(DType::f32, DType::bf16)));

TEST(Reshard, StageThreeCheckpointResumesAsStageOneAndAsOneProcess) {
  Communicator& world = anvil::world();
  RunSpec spec;
  spec.zero_stage = 3;
  spec.tied = false;
  const std::filesystem::path dir = shared_dir(world, "reshard");
  Harness writer(world, spec);
  writer.engine().init_weights(spec.seed);
  ptest::run_steps(writer, 0, kSaveAt);
  save(writer, dir);
  const Curve want = ptest::run_steps(writer, kSaveAt, kSteps);
  const std::vector<float> want_weights = writer.all_weights();

  spec.zero_stage = 1;
  Harness stage_one(world, spec);
  read_engine_checkpoint(stage_one.engine(), dir);
  const Curve got = ptest::run_steps(stage_one, kSaveAt, kSteps);
  EXPECT_EQ(got.loss_bits, want.loss_bits);
  EXPECT_TRUE(ptest::same_bits(stage_one.all_weights(), want_weights));

  // The same global batch on one process: grad_accum grows by the world size.
  auto single = make_single_process_communicator();
  RunSpec one = spec;
  one.zero_stage = 2;
  one.grad_accum = spec.grad_accum * world.size();
  Harness alone(*single, one);
  read_engine_checkpoint(alone.engine(), dir);
  const Curve got_alone = ptest::run_steps(alone, kSaveAt, kSteps);
  EXPECT_EQ(got_alone.loss_bits, want.loss_bits);
  EXPECT_TRUE(ptest::same_bits(alone.all_weights(), want_weights));
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace anvil
