// The tile classifier (backend/attention_tiles.h) and the diagonal band (backend/
// attention_band.h) against the mask rule itself, pair by pair, over thousands of random
// geometries: every mask kind (causal or not, windows, sinks, strided and lines patterns of
// several segment lengths) and offsets placing queries before, after and across the keys.
// Both drive device kernels that cannot run here, so their host-side logic is proven here.
#include <gtest/gtest.h>

#include <random>

#include "backend/attention_band.h"
#include "backend/attention_tiles.h"

namespace anvil {
namespace {

MaskRule random_rule(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  MaskRule rule;
  rule.causal = pick(0, 3) != 0;
  rule.window = pick(0, 2) == 0 ? pick(1, 90) : 0;
  rule.sinks = pick(0, 3) == 0 ? pick(1, 20) : 0;
  const int pattern = pick(0, 2);
  rule.pattern = static_cast<SparsePattern>(pattern);
  if (rule.pattern != SparsePattern::dense) rule.segment = pick(1, 5) == 1 ? 1 : pick(2, 80);
  if (rule.pattern == SparsePattern::strided) rule.stride = pick(1, 5);
  return rule;
}

TEST(AttentionTiles, ClassificationAgreesWithEveryPair) {
  std::mt19937 rng(42);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int counts[3] = {0, 0, 0};
  for (int trial = 0; trial < 20000; ++trial) {
    const MaskRule rule = random_rule(rng);
    const int64_t q_first = pick(0, 400), k_first = pick(0, 400);
    const int64_t q_last = q_first + pick(0, 70), k_last = k_first + pick(0, 70);
    const TileVisibility got = classify_tile(rule, q_first, q_last, k_first, k_last);
    int visible = 0, pairs = 0;
    for (int64_t t = q_first; t <= q_last; ++t)
      for (int64_t s = k_first; s <= k_last; ++s, ++pairs) visible += position_visible(rule, t, s);
    ++counts[static_cast<int>(got)];
    if (got == TileVisibility::hidden) {
      ASSERT_EQ(visible, 0) << "trial " << trial << ": a tile called hidden has visible pairs";
    } else if (got == TileVisibility::full) {
      ASSERT_EQ(visible, pairs) << "trial " << trial << ": a tile called full has hidden pairs";
    }
  }
  // The classifier must be useful, not only safe: each answer occurs often.
  EXPECT_GT(counts[0], 2000);
  EXPECT_GT(counts[1], 2000);
  EXPECT_GT(counts[2], 2000);
}

TEST(AttentionTiles, DenseCausalTilesAreExact) {
  // Without windows, sinks or patterns the answer is exact: never `partial` for a tile that is
  // all visible or all hidden.
  const MaskRule causal;
  EXPECT_EQ(classify_tile(causal, 64, 127, 0, 63), TileVisibility::full);
  EXPECT_EQ(classify_tile(causal, 64, 127, 64, 127), TileVisibility::partial);
  EXPECT_EQ(classify_tile(causal, 64, 127, 128, 191), TileVisibility::hidden);
  MaskRule lines;
  lines.pattern = SparsePattern::lines;
  lines.segment = 64;
  // Segment distance 3 is neither 0 nor a power of two; 4 is.
  EXPECT_EQ(classify_tile(lines, 192, 255, 0, 63), TileVisibility::hidden);
  EXPECT_EQ(classify_tile(lines, 256, 319, 0, 63), TileVisibility::full);
}

// Returns whether query row r sees key column c under the band.
bool band_visible(const DiagonalBand& band, int64_t r, int64_t c) {
  if (band.right && c - r > *band.right) return false;
  if (band.left && r - c >= *band.left) return false;
  return true;
}

TEST(AttentionBand, BandAgreesWithEveryPair) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int bands = 0, refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    AttentionParams p;
    p.causal = pick(0, 3) != 0;
    p.window = pick(0, 1) == 0 ? pick(1, 60) : 0;
    p.sinks = pick(0, 5) == 0 ? pick(1, 10) : 0;
    const int64_t Tq = pick(1, 40), Tk = pick(1, 40);
    p.q_offset = pick(0, 80);
    p.k_offset = pick(0, 1) == 0 ? p.q_offset : pick(0, 80);
    const std::optional<DiagonalBand> band = diagonal_band_for(Tq, Tk, p);
    const MaskRule rule = p.mask_rule();
    bool every_row_sees = true;
    for (int64_t r = 0; r < Tq; ++r) {
      bool sees = false;
      for (int64_t c = 0; c < Tk; ++c) {
        const bool want = position_visible(rule, p.q_offset + r, p.k_offset + c);
        sees |= want;
        if (band) {
          ASSERT_EQ(band_visible(*band, r, c), want)
              << "trial " << trial << " row " << r << " column " << c;
        }
      }
      every_row_sees &= sees;
    }
    if (band) {
      ++bands;
      ASSERT_TRUE(every_row_sees) << "trial " << trial << ": a band with an empty row";
      if (band->right) {
        ASSERT_GE(*band->right, 0);
      }
      if (band->left) {
        ASSERT_GE(*band->left, 1);
        ASSERT_TRUE(band->right.has_value()) << "a left bound always comes with a right one";
      }
    } else {
      ++refused;
      // Refused only when the mask is not a band (sinks under a window), a row sees nothing, or
      // the left bound would be below 1 (keys more than a window before every query's row).
      const bool left_below_one = p.window > 0 && p.window - (p.q_offset - p.k_offset) < 1;
      ASSERT_TRUE((p.sinks > 0 && p.window > 0) || !every_row_sees || left_below_one)
          << "trial " << trial << " Tq " << Tq << " Tk " << Tk << " causal " << p.causal
          << " window " << p.window << " q_offset " << p.q_offset << " k_offset " << p.k_offset;
    }
  }
  EXPECT_GT(bands, 5000);
  EXPECT_GT(refused, 1000);
}

TEST(AttentionBand, RefusesWhatIsNotABand) {
  AttentionParams p;
  EXPECT_FALSE(diagonal_band_for(0, 4, p).has_value());
  p.pattern = SparsePattern::lines;
  p.segment = 4;
  EXPECT_FALSE(diagonal_band_for(8, 8, p).has_value());
  AttentionParams docs;
  const Tensor ids;
  docs.doc_ids = &ids;
  EXPECT_FALSE(diagonal_band_for(8, 8, docs).has_value());
  // Training's causal self-attention: the main diagonal, no left bound.
  const std::optional<DiagonalBand> causal = diagonal_band_for(2048, 2048, AttentionParams{});
  ASSERT_TRUE(causal.has_value());
  EXPECT_EQ(causal->right, 0);
  EXPECT_FALSE(causal->left.has_value());
  // A key block wholly before causal queries (a ring step) is unmasked.
  AttentionParams earlier;
  earlier.q_offset = 128;
  const std::optional<DiagonalBand> full = diagonal_band_for(64, 64, earlier);
  ASSERT_TRUE(full.has_value());
  EXPECT_FALSE(full->right.has_value());
  EXPECT_FALSE(full->left.has_value());
}

}  // namespace
}  // namespace anvil
