// AttentionSchedule: which layers a mask applies to, and the visible-pair fraction that scales
// the attention term of a step's FLOP count, against a pair-by-pair count of the mask rule.
#include <gtest/gtest.h>

#include "model/attention_schedule.h"
#include "model/llama_config.h"

namespace anvil {
namespace {

// Returns the causal pairs the rule leaves visible, counted pair by pair.
double brute_force_fraction(const MaskRule& rule, int64_t n) {
  double visible = 0.0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t s = 0; s <= t; ++s) visible += position_visible(rule, t, s) ? 1.0 : 0.0;
  return visible / (static_cast<double>(n) * (n + 1) / 2.0);
}

TEST(AttentionSchedule, VisibleFractionCountsTheRulesPairs) {
  const int64_t n = 1000;  // not a multiple of the segments: a partial last segment
  for (const SparsePattern pattern :
       {SparsePattern::dense, SparsePattern::strided, SparsePattern::lines}) {
    for (const int window : {0, 300}) {
      for (const int sinks : {0, 5}) {
        AttentionSchedule schedule;
        schedule.pattern = pattern;
        schedule.segment = pattern == SparsePattern::dense ? 0 : 64;
        schedule.stride = pattern == SparsePattern::strided ? 3 : 0;
        schedule.window = window;
        schedule.sinks = pattern == SparsePattern::dense && window == 0 ? 0 : sinks;
        AttentionParams params;
        schedule.apply(0, params);
        EXPECT_NEAR(schedule.visible_fraction(0, n), brute_force_fraction(params.mask_rule(), n),
                    1e-12)
            << static_cast<int>(pattern) << " window " << window << " sinks " << sinks;
      }
    }
  }
}

TEST(AttentionSchedule, DenseLayersAndTheFlopCount) {
  AttentionSchedule schedule;
  schedule.pattern = SparsePattern::lines;
  schedule.segment = 256;
  schedule.dense_every = 2;
  const double lines = schedule.visible_fraction(0, 8192);
  EXPECT_NEAR(lines, 0.2833, 1e-4);  // the lines pattern's share at 8K (AttentionMask tests)
  EXPECT_EQ(schedule.visible_fraction(1, 8192), 1.0);
  EXPECT_NEAR(schedule.mean_visible_fraction(4, 8192), (lines + 1.0) / 2.0, 1e-12);
  LlamaConfig config;
  config.n_layers = 4;
  const double dense = config.flops_per_token(8192);
  const double attention = dense - 6.0 * static_cast<double>(config.matmul_param_count());
  EXPECT_NEAR(config.flops_per_token(8192, 0.25), dense - 0.75 * attention, 1e-6 * dense);
}

}  // namespace
}  // namespace anvil
