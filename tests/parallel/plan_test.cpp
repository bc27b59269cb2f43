// Mesh resolution, shard arithmetic and decay spans.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "model/llama_parameters.h"
#include "parallel/mesh.h"
#include "parallel/shard_plan.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

MeshShape resolve(int dp, int fsdp, int stage, int world, int tp = 1, int cp = 1) {
  ParallelSettings s;
  s.dp = dp;
  s.fsdp = fsdp;
  s.zero_stage = stage;
  s.tp = tp;
  s.cp = cp;
  return resolve_mesh_shape(s, world);
}

std::string error_of(int dp, int fsdp, int stage, int world, int tp = 1, int cp = 1) {
  try {
    resolve(dp, fsdp, stage, world, tp, cp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Mesh, AutomaticAxesFollowTheStage) {
  EXPECT_EQ(resolve(0, 0, 0, 4).dp, 4);
  EXPECT_EQ(resolve(0, 0, 0, 4).fsdp, 1);
  EXPECT_EQ(resolve(0, 0, 2, 4).fsdp, 4);
  EXPECT_EQ(resolve(0, 0, 2, 4).dp, 1);
  EXPECT_EQ(resolve(2, 0, 3, 4).fsdp, 2);
  EXPECT_EQ(resolve(0, 2, 1, 8).dp, 4);
  EXPECT_EQ(resolve(1, 1, 0, 1).dp, 1);
  // Tensor parallelism takes its factor first; the automatic axes share the rest.
  EXPECT_EQ(resolve(0, 0, 0, 8, 2).dp, 4);
  EXPECT_EQ(resolve(0, 0, 3, 8, 4).fsdp, 2);
  EXPECT_EQ(resolve(0, 0, 3, 8, 4).dp, 1);
  EXPECT_EQ(resolve(2, 0, 1, 8, 2).fsdp, 2);
  // So does context parallelism (after tp).
  EXPECT_EQ(resolve(0, 0, 0, 8, 2, 2).dp, 2);
  EXPECT_EQ(resolve(0, 0, 3, 8, 1, 2).fsdp, 4);
  EXPECT_EQ(resolve(1, 0, 3, 8, 2, 2).fsdp, 2);
}

TEST(Mesh, ClearErrors) {
  EXPECT_NE(error_of(2, 2, 1, 6).find("2 x 2 x 1 = 4 but the job has 6 ranks"), std::string::npos);
  EXPECT_NE(error_of(0, 0, 0, 4, 3).find("tp = 3 does not divide the 4 ranks"), std::string::npos);
  EXPECT_NE(error_of(0, 0, 0, 4, 0).find("tp must be at least 1, got 0"), std::string::npos);
  EXPECT_NE(error_of(2, 2, 1, 8, 4).find("2 x 2 x 4 = 16 but the job has 8 ranks"),
            std::string::npos);
  EXPECT_NE(error_of(0, 3, 1, 4).find("fsdp = 3 does not divide the 4 ranks"), std::string::npos);
  EXPECT_NE(error_of(0, 0, 4, 4).find("zero_stage must be 0, 1, 2 or 3, got 4"),
            std::string::npos);
  EXPECT_NE(error_of(1, 2, 0, 2).find("zero_stage is 0"), std::string::npos);
  EXPECT_NE(error_of(0, 0, 0, 6, 2, 2).find("tp x cp = 2 x 2 does not divide the 6 ranks"),
            std::string::npos);
  EXPECT_NE(error_of(2, 2, 0, 8, 1, 4).find("dp x fsdp x tp x cp = 2 x 2 x 1 x 4 = 16 but the "
                                            "job has 8 ranks"),
            std::string::npos);
  EXPECT_NE(error_of(0, 0, 0, 4, 1, 0).find("cp must be at least 1, got 0"), std::string::npos);
}

// Without context parallelism the cp axis is one rank and the sample rank is the data rank.
TEST(Mesh, ContextParallelAxisOnOneProcess) {
  auto comm = make_single_process_communicator();
  ParallelSettings settings;
  settings.cp = 1;
  DeviceMesh mesh(*comm, settings);
  EXPECT_EQ(mesh.cp().size(), 1);
  EXPECT_EQ(mesh.sample_rank(), 0);
  EXPECT_EQ(mesh.sample_world(), 1);
  EXPECT_FALSE(mesh.context_parallel().enabled());
}

TEST(Mesh, SingleProcessMeshHasUnitAxes) {
  auto comm = make_single_process_communicator();
  ParallelSettings settings;
  settings.zero_stage = 3;
  DeviceMesh mesh(*comm, settings);
  EXPECT_EQ(mesh.fsdp().size(), 1);
  EXPECT_EQ(mesh.dp().size(), 1);
  EXPECT_EQ(mesh.describe(), "world 1 = dp 1 x fsdp 1 x tp 1, ZeRO stage 3");
}

TEST(ShardPlan, ShardsAndSlicesTileThePaddedGroup) {
  const auto layout = make_llama_layout(ptest::tiny_config(false), true);
  for (int world : {1, 2, 3, 4, 6}) {
    for (int fsdp : {1, 2, 3}) {
      if (world % fsdp != 0) continue;
      const int dp = world / fsdp;
      for (int g = 0; g < layout->group_count(); ++g) {
        int64_t covered = 0, shard_real = 0;
        for (int rank = 0; rank < world; ++rank) {
          const GroupShard s = ShardPlan(*layout, world, fsdp, rank).group(g);
          ASSERT_EQ(s.padded % (world * kShardAlignment), 0);
          ASSERT_GE(s.padded, s.numel);
          ASSERT_LT(s.padded - s.numel, world * kShardAlignment);
          ASSERT_EQ(s.shard * fsdp, s.padded);
          ASSERT_EQ(s.slice * world, s.padded);
          // World slices of one fsdp shard are its dp replicas' slices, in dp order.
          ASSERT_EQ(s.slice_begin, s.shard_begin + (rank % dp) * s.slice);
          covered += s.slice_length;
          if (rank % dp == 0) shard_real += s.shard_length;
        }
        EXPECT_EQ(covered, layout->group_numel(g));
        EXPECT_EQ(shard_real, layout->group_numel(g));
      }
    }
  }
}

TEST(ShardPlan, SpansInARangeAreRebasedAndClipped) {
  const auto layout = make_llama_layout(ptest::tiny_config(true), true);
  const auto spans = layout_decay_spans(*layout);
  for (int g = 0; g < layout->group_count(); ++g) {
    int64_t next = 0;
    for (const ParamSpan& span : spans[g]) {
      EXPECT_EQ(span.offset, next);
      next += span.count;
    }
    EXPECT_EQ(next, layout->group_numel(g));
  }
  const std::vector<ParamSpan> full = {{0, 32, false}, {32, 64, true}, {96, 16, false}};
  const std::vector<ParamSpan> part = spans_in_range(full, 16, 96);
  ASSERT_EQ(part.size(), 3u);
  EXPECT_EQ(part[0].offset, 0);
  EXPECT_EQ(part[0].count, 16);
  EXPECT_FALSE(part[0].weight_decay);
  EXPECT_EQ(part[1].offset, 16);
  EXPECT_EQ(part[1].count, 64);
  EXPECT_EQ(part[2].count, 16);
  EXPECT_TRUE(spans_in_range(full, 112, 16).empty());
}

}  // namespace
}  // namespace anvil
