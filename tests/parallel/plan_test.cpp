// Mesh resolution, shard arithmetic, decay spans and the exact sum of squares.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/llama_parameters.h"
#include "parallel/exact_sum.h"
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

std::vector<float> wide_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 60);
  std::vector<float> values(n);
  for (float& v : values) v = std::ldexp(mantissa(rng), exponent(rng));
  return values;
}

TEST(ExactSquareSum, EveryGroupingGivesTheSameBits) {
  const std::vector<float> values = wide_values(300000, 7);
  ExactSquareSum whole;
  whole.add_squares(values.data(), static_cast<int64_t>(values.size()));
  for (size_t parts : {2u, 3u, 7u, 64u}) {
    ExactSquareSum combined;
    for (size_t p = 0; p < parts; ++p) {
      const size_t begin = values.size() * p / parts, end = values.size() * (p + 1) / parts;
      ExactSquareSum piece;
      piece.add_squares(values.data() + begin, static_cast<int64_t>(end - begin));
      combined.add(piece);
    }
    EXPECT_EQ(combined, whole) << parts << " parts";
  }
  std::vector<float> shuffled = values;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  ExactSquareSum reordered;
  reordered.add_squares(shuffled.data(), static_cast<int64_t>(shuffled.size()));
  EXPECT_EQ(reordered, whole);
  EXPECT_EQ(ExactSquareSum::from_words(whole.to_words()), whole);
}

TEST(ExactSquareSum, ValueIsTheCorrectSum) {
  const std::vector<float> values = {3.0f, -4.0f, 1e-30f, 1e20f, 0.0f, -0.0f, 1e-45f};
  ExactSquareSum sum;
  sum.add_squares(values.data(), static_cast<int64_t>(values.size()));
  long double expected = 0;
  for (float v : values) expected += static_cast<long double>(v) * v;
  EXPECT_NEAR(sum.value(), static_cast<double>(expected), 1e-15 * static_cast<double>(expected));

  const std::vector<float> small = {0.5f, 0.25f, 3.0f};
  ExactSquareSum exact;
  exact.add_squares(small.data(), 3);
  EXPECT_EQ(exact.value(), 0.25 + 0.0625 + 9.0);
  EXPECT_TRUE(exact.finite());
  EXPECT_EQ(ExactSquareSum().value(), 0.0);
}

TEST(ExactSquareSum, NonFiniteValuesPropagate) {
  std::vector<float> values = wide_values(1000, 1);
  values[17] = std::numeric_limits<float>::infinity();
  ExactSquareSum inf;
  inf.add_squares(values.data(), 1000);
  EXPECT_FALSE(inf.finite());
  EXPECT_TRUE(std::isinf(inf.value()));
  values[500] = std::nanf("");
  ExactSquareSum nan;
  nan.add_squares(values.data(), 1000);
  EXPECT_TRUE(std::isnan(nan.value()));
  ExactSquareSum finite;
  finite.add(nan);
  EXPECT_TRUE(std::isnan(finite.value()));
}

}  // namespace
}  // namespace anvil
