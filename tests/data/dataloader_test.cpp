// DataLoader over synthetic token shards: window contents across part boundaries, seeded and
// reproducible order, a fresh permutation per epoch that visits every window exactly once,
// document ids and loss masks, and clear errors for unusable splits.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "data/dataloader.h"
#include "data/random.h"
#include "data_test_util.h"

namespace anvil {
namespace {

using testing::expect_error;
using testing::TempDir;

constexpr int32_t kEos = 0;
constexpr uint32_t kVocab = 500;

// Documents of varied lengths whose tokens are 1 + (running index % 499), each ending in EOS.
std::vector<std::vector<int32_t>> make_documents(int count, int first_length, uint32_t& next) {
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < count; ++d) {
    std::vector<int32_t> doc;
    const int length = first_length + (d * 7) % 13;
    for (int i = 0; i < length; ++i) doc.push_back(static_cast<int32_t>(1 + next++ % (kVocab - 1)));
    doc.push_back(kEos);
    docs.push_back(doc);
  }
  return docs;
}

// A dataset folder with a two-part train split; `stream` receives the concatenated tokens.
struct Dataset {
  TempDir dir;
  std::vector<int32_t> stream;

  explicit Dataset(int docs_per_part = 20) {
    uint32_t next = 0;
    for (int part = 0; part < 2; ++part) {
      const auto docs = make_documents(docs_per_part, 3 + part, next);
      testing::write_shard(dir.file(shard_file_name("train", part)), docs, kVocab, kEos);
      for (const auto& doc : docs) stream.insert(stream.end(), doc.begin(), doc.end());
    }
  }
};

struct Batch {
  std::vector<int32_t> tokens, targets, doc_ids;
  std::vector<float> loss_mask;
  Batch(int count, int seq_len)
      : tokens(count * seq_len),
        targets(count * seq_len),
        doc_ids(count * seq_len),
        loss_mask(count * seq_len) {}
};

Batch fill_batch(SampleSource& source, int64_t first, int count) {
  const int seq_len = source.seq_len();
  Batch batch(count, seq_len);
  const Shape shape{count, seq_len};
  const Tensor tokens(batch.tokens.data(), DType::i32, shape);
  const Tensor targets(batch.targets.data(), DType::i32, shape);
  const Tensor doc_ids(batch.doc_ids.data(), DType::i32, shape);
  const Tensor loss_mask(batch.loss_mask.data(), DType::f32, shape);
  source.fill(first, count, tokens, targets, &doc_ids, &loss_mask);
  return batch;
}

TEST(DataLoader, WindowsMatchTheConcatenatedStream) {
  Dataset data;
  const int seq_len = 16;
  DataLoader loader(data.dir.path(), "train", seq_len, /*seed=*/7);
  const int64_t windows = static_cast<int64_t>((data.stream.size() - 1) / seq_len);
  ASSERT_EQ(loader.windows_per_epoch(), windows);
  EXPECT_EQ(loader.token_count(), data.stream.size());
  EXPECT_EQ(loader.vocab_size(), static_cast<int32_t>(kVocab));
  EXPECT_EQ(loader.tokenizer_fingerprint(), "0123456789abcdef");
  EXPECT_EQ(loader.eos_id(), kEos);
  EXPECT_EQ(loader.shards().files().size(), 2u);
  const Batch batch = fill_batch(loader, 0, static_cast<int>(windows));
  for (int64_t s = 0; s < windows; ++s) {
    const int64_t start = loader.window_of_sample(s) * seq_len;
    for (int p = 0; p < seq_len; ++p) {
      ASSERT_EQ(batch.tokens[s * seq_len + p], data.stream[start + p]);
      ASSERT_EQ(batch.targets[s * seq_len + p], data.stream[start + p + 1]);
      ASSERT_EQ(batch.loss_mask[s * seq_len + p], 1.0f);
    }
  }
}

TEST(DataLoader, DocIdsCountEosTokensSeenInTheWindow) {
  Dataset data;
  const int seq_len = 12;
  DataLoader loader(data.dir.path(), "train", seq_len, 3);
  const int count = static_cast<int>(loader.windows_per_epoch());
  const Batch batch = fill_batch(loader, 0, count);
  bool saw_several_documents = false;
  for (int s = 0; s < count; ++s) {
    int32_t expected = 0;
    for (int p = 0; p < seq_len; ++p) {
      ASSERT_EQ(batch.doc_ids[s * seq_len + p], expected) << "sample " << s << " position " << p;
      if (batch.tokens[s * seq_len + p] == kEos) ++expected;
    }
    saw_several_documents = saw_several_documents || expected > 1;
  }
  EXPECT_TRUE(saw_several_documents);
}

TEST(DataLoader, SameSeedSameSamplesOtherSeedOtherOrder) {
  Dataset data;
  DataLoader a(data.dir.path(), "train", 8, 42);
  DataLoader b(data.dir.path(), "train", 8, 42);
  DataLoader c(data.dir.path(), "train", 8, 43);
  EXPECT_EQ(fill_batch(a, 5, 9).tokens, fill_batch(b, 5, 9).tokens);
  EXPECT_NE(fill_batch(a, 0, 9).tokens, fill_batch(c, 0, 9).tokens);
  // A sample's content does not depend on which call or batch it is read in.
  const Batch wide = fill_batch(a, 0, 12);
  const Batch single = fill_batch(b, 7, 1);
  EXPECT_TRUE(std::equal(single.tokens.begin(), single.tokens.end(), wide.tokens.begin() + 7 * 8));
}

TEST(DataLoader, EveryEpochVisitsEveryWindowOnceInANewOrder) {
  Dataset data;
  DataLoader loader(data.dir.path(), "train", 8, 11);
  const int64_t windows = loader.windows_per_epoch();
  ASSERT_GT(windows, 20);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    for (int64_t i = 0; i < windows; ++i)
      order.push_back(loader.window_of_sample(epoch * windows + i));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t w = 0; w < windows; ++w) ASSERT_EQ(sorted[w], w) << "epoch " << epoch;
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  // Going back to an earlier epoch reproduces it (the cache is only an optimisation).
  EXPECT_EQ(loader.window_of_sample(3), orders[0][3]);
}

TEST(DataLoader, SequentialModeReadsWindowsInOrder) {
  Dataset data;
  DataLoader loader(data.dir.path(), "train", 10, 99, /*shuffle=*/false);
  EXPECT_EQ(loader.eval_windows(), loader.windows_per_epoch());
  for (int64_t i = 0; i < loader.eval_windows(); ++i) EXPECT_EQ(loader.window_of_sample(i), i);
  EXPECT_EQ(loader.window_of_sample(loader.eval_windows() + 2), 2);
  const Batch batch = fill_batch(loader, 1, 1);
  EXPECT_TRUE(std::equal(batch.tokens.begin(), batch.tokens.end(), data.stream.begin() + 10));
}

TEST(DataLoader, PermutationIsAPinnedFunctionOfSeedAndEpoch) {
  // Guards the documented algorithm: a change here changes every run's data order.
  const auto perm = data::epoch_permutation(10, 1234, 0);
  std::vector<uint32_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0u);
  data::SplitMix64 rng(data::hash_pair(1234, 0));
  for (uint32_t i = 10; i > 1; --i) std::swap(expected[i - 1], expected[rng.below(i)]);
  EXPECT_EQ(perm, expected);
  EXPECT_EQ(data::mix64(0), 0xE220A8397B1DCDAFull);  // splitmix64's first output for seed 0
}

TEST(DataLoader, LossMaskComesFromTheTargetToken) {
  TempDir dir;
  const std::vector<std::vector<int32_t>> docs = {{5, 6, 7, 0}, {8, 9, 1, 2, 0}};
  const std::vector<std::vector<uint8_t>> masks = {{0, 0, 1, 1}, {0, 0, 1, 1, 1}};
  testing::write_shard(dir.file("train-00000.tok"), docs, 10, 0, &masks);
  DataLoader loader(dir.path(), "train", 8, 0, /*shuffle=*/false);
  ASSERT_EQ(loader.windows_per_epoch(), 1);
  const Batch batch = fill_batch(loader, 0, 1);
  EXPECT_EQ(batch.tokens, (std::vector<int32_t>{5, 6, 7, 0, 8, 9, 1, 2}));
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{6, 7, 0, 8, 9, 1, 2, 0}));
  EXPECT_EQ(batch.loss_mask, (std::vector<float>{0, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(batch.doc_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(DataLoader, RejectsSplitsTooShortOrIncomplete) {
  Dataset data(2);
  const std::string dir = data.dir.path();
  const int too_long = static_cast<int>(data.stream.size());
  expect_error([&] { DataLoader(dir, "train", too_long, 0); },
               {"[data]", "split 'train'", "too few for one sample of seq_len"});
  DataLoader just_fits(dir, "train", too_long - 1, 0);
  EXPECT_EQ(just_fits.windows_per_epoch(), 1);
  expect_error([&] { DataLoader(dir, "val", 4, 0); }, {"no shards for split 'val'"});
  std::filesystem::copy_file(dir + "/train-00001.tok", dir + "/train-00003.tok");
  expect_error([&] { DataLoader(dir, "train", 4, 0); }, {"train-00002.tok is missing"});
  std::filesystem::remove(dir + "/train-00003.tok");
  uint32_t next = 0;
  testing::write_shard(dir + "/train-00002.tok", make_documents(2, 3, next), kVocab + 1, kEos);
  expect_error([&] { DataLoader(dir, "train", 4, 0); },
               {"train-00002.tok: vocabulary/tokenizer differs"});
}

TEST(DataLoader, RejectsWrongTensors) {
  Dataset data;
  DataLoader loader(data.dir.path(), "train", 8, 0);
  std::vector<int32_t> buffer(16);
  std::vector<float> floats(16);
  const Tensor good(buffer.data(), DType::i32, Shape{2, 8});
  const Tensor wrong_shape(buffer.data(), DType::i32, Shape{2, 7});
  const Tensor wrong_dtype(floats.data(), DType::f32, Shape{2, 8});
  expect_error([&] { loader.fill(0, 2, wrong_shape, good, nullptr, nullptr); }, {"tokens"});
  expect_error([&] { loader.fill(0, 2, good, wrong_dtype, nullptr, nullptr); }, {"targets"});
  expect_error([&] { loader.fill(0, 2, good, good, nullptr, &good); }, {"loss_mask"});
  expect_error([&] { loader.fill(-1, 2, good, good, nullptr, nullptr); }, {"negative"});
}

}  // namespace
}  // namespace anvil
