// The mask rule itself (backend/attention_mask.h): its patterns against hand-listed visible
// pairs, and the visible-pair counts that make the sparse patterns worth having: lines grows
// as n log n and strided as n^2 / stride, against dense causal's n^2 / 2.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/attention_mask.h"

namespace anvil {
namespace {

MaskRule rule(SparsePattern pattern, int segment, int stride = 0, int sinks = 0) {
  MaskRule r;
  r.pattern = pattern;
  r.segment = segment;
  r.stride = stride;
  r.sinks = sinks;
  return r;
}

TEST(AttentionMask, LinesSeesTheSegmentsAPowerOfTwoBack) {
  const MaskRule lines = rule(SparsePattern::lines, 1);
  // Distances 0, 1, 2, 4 and 8 from query 12; 3, 5, 6, ... and the future are hidden.
  for (int s : {4, 8, 10, 11, 12}) EXPECT_TRUE(position_visible(lines, 12, s)) << s;
  for (int s : {0, 1, 2, 3, 5, 6, 7, 9, 13}) EXPECT_FALSE(position_visible(lines, 12, s)) << s;
}

TEST(AttentionMask, StridedSinksAndWindow) {
  const MaskRule strided = rule(SparsePattern::strided, 4, 3);
  // Query 37 is in segment 9: segments 9, 6, 3 and 0 are visible.
  for (int s : {0, 3, 12, 15, 24, 27, 36, 37}) EXPECT_TRUE(position_visible(strided, 37, s)) << s;
  for (int s : {4, 11, 16, 23, 28, 35, 38}) EXPECT_FALSE(position_visible(strided, 37, s)) << s;
  MaskRule windowed;
  windowed.window = 3;
  windowed.sinks = 2;
  for (int s : {0, 1, 8, 9, 10}) EXPECT_TRUE(position_visible(windowed, 10, s)) << s;
  for (int s : {2, 7, 11}) EXPECT_FALSE(position_visible(windowed, 10, s)) << s;
}

// Returns the visible (query, key) pairs of a causal n-position sequence, counted by segment
// pairs (every pair inside two related segments is visible; a segment sees half of itself).
double visible_pairs(const MaskRule& r, int64_t n) {
  const int64_t segments = n / r.segment;
  const double own = static_cast<double>(r.segment) * (r.segment + 1) / 2;
  double pairs = 0.0;
  for (int64_t q = 0; q < segments; ++q) {
    pairs += own;
    for (int64_t k = 0; k < q; ++k)
      if (position_visible(r, q * r.segment, k * r.segment))
        pairs += static_cast<double>(r.segment) * r.segment;
  }
  return pairs;
}

TEST(AttentionMask, SparsePatternsCutTheQuadraticCost) {
  for (int64_t n : {int64_t{8192}, int64_t{65536}}) {
    const double dense = static_cast<double>(n) * (n + 1) / 2;
    const double lines = visible_pairs(rule(SparsePattern::lines, 256), n);
    const double log_segments = std::log2(static_cast<double>(n) / 256);
    // Each query sees its own segment and at most log2(segments) earlier ones.
    EXPECT_LE(lines, static_cast<double>(n) * 256 * (log_segments + 1));
    EXPECT_GT(lines, static_cast<double>(n) * 256 * (log_segments - 1) / 2);
    const double strided = visible_pairs(rule(SparsePattern::strided, 256, 8), n);
    EXPECT_NEAR(strided / dense, 1.0 / 8, 0.03);
    std::printf("n=%lld: dense %.3g pairs, lines %.3g (%.2f%%), strided 8 %.3g (%.2f%%)\n",
                static_cast<long long>(n), dense, lines, 100 * lines / dense, strided,
                100 * strided / dense);
  }
}

}  // namespace
}  // namespace anvil
