// SyntheticData: tokens are a pure function of (seed, sample, position), lie inside the
// vocabulary, and targets are the inputs shifted by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/synthetic.h"
#include "data_test_util.h"

namespace anvil {
namespace {

struct Filled {
  std::vector<int32_t> tokens, targets, doc_ids;
  std::vector<float> loss_mask;
};

Filled fill(SyntheticData& source, int64_t first, int count) {
  const int seq_len = source.seq_len();
  Filled out{std::vector<int32_t>(count * seq_len), std::vector<int32_t>(count * seq_len),
             std::vector<int32_t>(count * seq_len, -1), std::vector<float>(count * seq_len, -1)};
  const Shape shape{count, seq_len};
  const Tensor doc_ids(out.doc_ids.data(), DType::i32, shape);
  const Tensor loss_mask(out.loss_mask.data(), DType::f32, shape);
  source.fill(first, count, Tensor(out.tokens.data(), DType::i32, shape),
              Tensor(out.targets.data(), DType::i32, shape), &doc_ids, &loss_mask);
  return out;
}

TEST(SyntheticData, DeterministicPerSampleIndex) {
  SyntheticData a(32000, 16, 1), b(32000, 16, 1), other(32000, 16, 2);
  const Filled batch = fill(a, 100, 8);
  EXPECT_EQ(batch.tokens, fill(b, 100, 8).tokens);
  EXPECT_NE(batch.tokens, fill(other, 100, 8).tokens);
  const Filled one = fill(b, 103, 1);
  EXPECT_TRUE(std::equal(one.tokens.begin(), one.tokens.end(), batch.tokens.begin() + 3 * 16));
  EXPECT_NE(fill(a, 0, 1).tokens, fill(a, 1, 1).tokens);
}

TEST(SyntheticData, TargetsAreShiftedInputsInsideTheVocabulary) {
  SyntheticData source(50, 32, 7);
  const Filled batch = fill(source, 0, 64);
  std::set<int32_t> seen;
  for (int r = 0; r < 64; ++r) {
    for (int p = 0; p < 32; ++p) {
      const int32_t t = batch.tokens[r * 32 + p];
      ASSERT_TRUE(t >= 0 && t < 50);
      seen.insert(t);
      ASSERT_EQ(batch.targets[r * 32 + p], source.token(r, p + 1));
      if (p + 1 < 32) {
        ASSERT_EQ(batch.targets[r * 32 + p], batch.tokens[r * 32 + p + 1]);
      }
    }
  }
  EXPECT_EQ(seen.size(), 50u);  // 2048 draws cover all 50 ids
  EXPECT_TRUE(
      std::all_of(batch.doc_ids.begin(), batch.doc_ids.end(), [](int32_t d) { return d == 0; }));
  EXPECT_TRUE(std::all_of(batch.loss_mask.begin(), batch.loss_mask.end(),
                          [](float m) { return m == 1.0f; }));
}

TEST(SyntheticData, RejectsBadSizes) {
  testing::expect_error([] { SyntheticData(0, 8, 1); }, {"vocab_size"});
  testing::expect_error([] { SyntheticData(10, 0, 1); }, {"seq_len"});
}

}  // namespace
}  // namespace anvil
