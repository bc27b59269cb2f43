// Fast reductions (parallel.reduce = fast) under mpirun, against the exact ones on the same
// mesh: with an f32 reduce the loss of every one of 20 steps is within 1e-5 relative of the
// exact run's, with a bf16 reduce within the bound derived below; and two fast runs on one
// mesh are equal bit for bit (the library's sums are repeatable for a fixed world and size;
// MPI runs bf16 sums as ordered sums).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Curve;
using ptest::Harness;
using ptest::RunSpec;

constexpr int kSteps = 20;

// The f32 bound is the issue's: the library's sums differ from the serial one only in the
// order they add the ranks' terms (a few ulps of 2^-24 per reduced value), far below it.
constexpr double kF32Bound = 1e-5;
// bf16 keeps 8 significant bits, so a reduced value carries at most two roundings of 2^-9
// relative (each term's cast to bf16, then the sum's), 2^-8 in all, of the terms it adds.
// The loss of step k depends on the reductions only through the k updates before it. One
// update moves this model's loss by far less than the loss, so perturbing it by 2^-8 moves
// the loss by less than 2^-8 of itself (the slack absorbs AdamW's per-element normalisation,
// which enlarges the relative error of elements whose terms cancel). Roundings to nearest are
// unbiased and independent from step to step, so the k perturbations add up like a random
// walk: the loss of step k is within 2^-8 sqrt(k) relative of the exact one. (A flat 2^-8,
// from a first-order argument that the loss moves by 2^-8 of what the updates move it, was
// this test's first bound; the 2-rank stage-1 run reached 0.94 of it and other seeds passed
// it: on random tokens the run does not descend, it wanders, and the perturbations of every
// step stay in the trajectory.)
constexpr double kBf16Unit = 1.0 / 256.0;

// Returns the largest over steps of |got - want| / (want bound(k)).
double largest_ratio_to_bound(const std::vector<double>& got, const std::vector<double>& want,
                              const std::function<double(size_t)>& bound) {
  double worst = 0.0;
  for (size_t k = 0; k < want.size(); ++k) {
    const double difference = std::abs(got[k] - want[k]) / std::abs(want[k]);
    const double limit = bound(k);
    worst = std::max(worst, limit > 0 ? difference / limit : difference > 0 ? INFINITY : 0.0);
  }
  return worst;
}

struct TrainedRun {
  Curve curve;
  std::vector<float> weights;
};

TrainedRun train(const RunSpec& spec) {
  Harness harness(anvil::world(), spec);
  harness.init(spec.seed);
  TrainedRun run;
  run.curve = ptest::run_steps(harness, 0, kSteps);
  run.weights = harness.all_weights();
  return run;
}

RunSpec fast_spec(RunSpec spec, DType dtype) {
  spec.reduce = ReduceMode::fast;
  spec.reduce_dtype = dtype;
  return spec;
}

class FastReduce : public ::testing::TestWithParam<int> {};

TEST_P(FastReduce, StaysNearTheExactLossCurveAndRepeatsBitForBit) {
  RunSpec exact;
  exact.zero_stage = GetParam();
  exact.grad_accum = 2;  // later micro-steps accumulate (stage 1) or add into the shard (3)
  const TrainedRun want = train(exact);
  const std::vector<double>& losses = want.curve.losses;
  EXPECT_GT(std::abs(losses.front() - losses.back()), 1e-3) << "the steps must move the loss";

  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " reduce");
    const TrainedRun got = train(fast_spec(exact, dtype));
    const TrainedRun again = train(fast_spec(exact, dtype));
    EXPECT_EQ(got.curve.loss_bits, again.curve.loss_bits);
    EXPECT_EQ(got.curve.norm_bits, again.curve.norm_bits);
    EXPECT_TRUE(ptest::same_bits(got.weights, again.weights));
    if (exact.zero_stage == 3) {
      // Offloaded, each micro-step's reduced slice starts from the host's total of the
      // earlier ones: the same additions, so the same bits.
      RunSpec offloaded = fast_spec(exact, dtype);
      offloaded.offload = true;
      const TrainedRun moved = train(offloaded);
      EXPECT_EQ(moved.curve.loss_bits, got.curve.loss_bits) << "offload changed the losses";
      EXPECT_TRUE(ptest::same_bits(moved.weights, got.weights)) << "offload changed the weights";
    }
    // The first loss is computed before any reduction.
    EXPECT_EQ(got.curve.loss_bits.front(), want.curve.loss_bits.front());
    const double ratio = largest_ratio_to_bound(got.curve.losses, losses, [&](size_t k) {
      return dtype == DType::f32 ? kF32Bound : kBf16Unit * std::sqrt(static_cast<double>(k));
    });
    EXPECT_LE(ratio, 1.0);
    if (anvil::world().rank() == 0) {
      std::printf("[ fast reduce ] stage %d, %d ranks, %s: max relative loss difference %.3g, "
                  "%.2f of the bound\n",
                  exact.zero_stage, anvil::world().size(), std::string(dtype_name(dtype)).c_str(),
                  ptest::max_relative_difference(got.curve.losses, losses), ratio);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, FastReduce, ::testing::Values(1, 3));

}  // namespace
}  // namespace anvil
