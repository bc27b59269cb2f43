// Batch layout and cursor: ranks take disjoint samples whose union is the single-process
// global batch, any (b, a, w) with the same G yields the same batches, and a cursor saved to
// JSON and restored in a fresh loader continues with exactly the next batch.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>

#include "data/cursor.h"
#include "data/dataloader.h"
#include "data/synthetic.h"
#include "data_test_util.h"

namespace anvil {
namespace {

using testing::expect_error;

// Returns every sample index the whole job reads in optimizer `step`, rank-major per micro-step.
std::vector<int64_t> samples_of_step(const BatchLayout& layout, int64_t step) {
  std::vector<int64_t> samples;
  for (int m = 0; m < layout.grad_accum; ++m)
    for (int r = 0; r < layout.world_size; ++r)
      for (int i = 0; i < layout.micro_batch; ++i)
        samples.push_back(layout.first_sample(step, m, r) + i);
  return samples;
}

TEST(BatchLayout, RanksPartitionTheGlobalBatch) {
  const BatchLayout layout{3, 2, 4};
  ASSERT_EQ(layout.global_batch(), 24);
  for (int64_t step : {0, 1, 17}) {
    std::vector<int64_t> samples = samples_of_step(layout, step);
    std::sort(samples.begin(), samples.end());
    std::vector<int64_t> expected(24);
    std::iota(expected.begin(), expected.end(), step * 24);
    EXPECT_EQ(samples, expected) << "step " << step;  // disjoint, and union == [kG, (k+1)G)
  }
  // The documented formula: micro-step m of rank r starts at k*G + (m*w + r)*b.
  EXPECT_EQ(layout.first_sample(2, 1, 3), 2 * 24 + (1 * 4 + 3) * 3);
}

TEST(BatchLayout, SameGlobalBatchSameDataForAnyWorldSize) {
  SyntheticData source(1000, 6, 5);
  std::vector<int32_t> single(24 * 6), targets(24 * 6);
  source.fill(24 * 3, 24, Tensor(single.data(), DType::i32, Shape{24, 6}),
              Tensor(targets.data(), DType::i32, Shape{24, 6}), nullptr, nullptr);
  for (const BatchLayout layout :
       {BatchLayout{24, 1, 1}, BatchLayout{2, 3, 4}, BatchLayout{1, 3, 8}}) {
    std::vector<int32_t> gathered(24 * 6);
    std::vector<int32_t> micro(layout.micro_batch * 6), micro_targets(layout.micro_batch * 6);
    for (int m = 0; m < layout.grad_accum; ++m) {
      for (int r = 0; r < layout.world_size; ++r) {
        const int64_t first = layout.first_sample(3, m, r);
        const Shape shape{layout.micro_batch, 6};
        source.fill(first, layout.micro_batch, Tensor(micro.data(), DType::i32, shape),
                    Tensor(micro_targets.data(), DType::i32, shape), nullptr, nullptr);
        std::copy(micro.begin(), micro.end(), gathered.begin() + (first - 24 * 3) * 6);
      }
    }
    EXPECT_EQ(gathered, single) << "b=" << layout.micro_batch << " a=" << layout.grad_accum
                                << " w=" << layout.world_size;
  }
}

TEST(BatchLayout, RejectsOutOfRangeArguments) {
  const BatchLayout layout{2, 2, 2};
  expect_error([&] { layout.first_sample(0, 2, 0); }, {"micro-step 2"});
  expect_error([&] { layout.first_sample(0, 0, 2); }, {"rank 2"});
  expect_error([&] { BatchLayout{0, 1, 1}.global_batch(); }, {"positive"});
}

TEST(DataCursor, JsonRoundTripAndValidation) {
  DataCursor cursor{123456789012, 42, 2048, "train", "00ff00ff00ff00ff", ""};
  const nlohmann::json json = cursor.to_json();
  EXPECT_EQ(DataCursor::from_json(nlohmann::json::parse(json.dump())), cursor);
  nlohmann::json missing = json;
  missing.erase("seq_len");
  expect_error([&] { DataCursor::from_json(missing); }, {"missing field 'seq_len'"});
  nlohmann::json mistyped = json;
  mistyped["next_sample"] = "12";
  expect_error([&] { DataCursor::from_json(mistyped); }, {"'next_sample' must be an integer"});
  DataCursor other_seed = cursor;
  other_seed.seed = 43;
  expect_error([&] { cursor.check_resumable_with(other_seed); }, {"seed 42"});
  cursor.check_resumable_with(cursor);
}

TEST(DataCursor, MixtureIsPartOfTheStreamIdentity) {
  DataCursor one{96, 7, 16, "train", "00ff00ff00ff00ff", ""};
  EXPECT_FALSE(one.to_json().contains("mixture"));  // one-dataset checkpoints stay as they were
  DataCursor mixed = one;
  mixed.mixture = "data/web 0.8; data/code 0.2";
  EXPECT_EQ(DataCursor::from_json(nlohmann::json::parse(mixed.to_json().dump())), mixed);
  DataCursor reweighted = mixed;
  reweighted.mixture = "data/web 0.5; data/code 0.5";
  expect_error([&] { mixed.check_resumable_with(reweighted); },
               {"trained on the mixture data/web 0.8; data/code 0.2",
                "now gives the mixture data/web 0.5"});
  expect_error([&] { one.check_resumable_with(mixed); },
               {"trained on one dataset (data.path)"});
  mixed.check_resumable_with(mixed);
}

TEST(DataCursor, ResumeContinuesWithExactlyTheNextBatch) {
  testing::TempDir dir;
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 60; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < 5 + d % 4; ++i) doc.push_back(1 + (d * 31 + i * 7) % 97);
    doc.push_back(0);
    docs.push_back(doc);
  }
  testing::write_shard(dir.file("train-00000.tok"), docs, 100, 0);
  const BatchLayout layout{2, 2, 2};
  const int seq_len = 8;
  const auto read_step = [&](DataLoader& loader, int64_t first) {
    std::vector<int32_t> tokens(layout.global_batch() * seq_len), targets(tokens.size());
    const Shape shape{layout.global_batch(), seq_len};
    loader.fill(first, static_cast<int>(layout.global_batch()),
                Tensor(tokens.data(), DType::i32, shape), Tensor(targets.data(), DType::i32, shape),
                nullptr, nullptr);
    return tokens;
  };
  // Uninterrupted run: 12 steps (crossing several epochs: W is about 45).
  DataLoader uninterrupted(dir.path(), "train", seq_len, 9);
  ASSERT_LT(uninterrupted.windows_per_epoch(), 12 * layout.global_batch());
  std::vector<std::vector<int32_t>> reference;
  for (int64_t step = 0; step < 12; ++step)
    reference.push_back(read_step(uninterrupted, step * layout.global_batch()));
  // Interrupted after 5 steps: save the cursor, restore it into a fresh loader.
  DataCursor saved{5 * layout.global_batch(), 9, seq_len, "train",
                   uninterrupted.tokenizer_fingerprint(), ""};
  const std::string checkpoint = saved.to_json().dump();
  DataLoader resumed(dir.path(), "train", seq_len, 9);
  DataCursor cursor = DataCursor::from_json(nlohmann::json::parse(checkpoint));
  cursor.check_resumable_with(
      DataCursor{0, resumed.seed(), resumed.seq_len(), "train", resumed.tokenizer_fingerprint(), ""});
  for (int64_t step = 5; step < 12; ++step) {
    EXPECT_EQ(read_step(resumed, cursor.next_sample), reference[step]) << "step " << step;
    cursor.next_sample += layout.global_batch();
  }
}

}  // namespace
}  // namespace anvil
