// MixtureSource: each source's share stays within one sample of its weight after any number
// of samples, a source's samples are read in order 0, 1, 2, ..., sample i's data does not
// depend on the order or the batches it is read in (resume and reshard), and bad mixtures are
// refused with a message naming the source.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "data/mixture.h"
#include "data/synthetic.h"
#include "data_test_util.h"

namespace anvil {
namespace {

// A source whose sample j holds (id, j, j, ...) as tokens, so a row says where it came from.
class IndexSource : public SampleSource {
 public:
  IndexSource(int32_t id, int seq_len = 4, int32_t vocab = 1 << 30)
      : id_(id), seq_len_(seq_len), vocab_(vocab) {}
  void fill(int64_t first_sample, int count, const Tensor& tokens, const Tensor& targets,
            const Tensor* doc_ids, const Tensor* loss_mask) override {
    check_fill_tensors(count, seq_len_, tokens, targets, doc_ids, loss_mask);
    for (int r = 0; r < count; ++r) {
      for (int p = 0; p < seq_len_; ++p) {
        tokens.i32()[r * seq_len_ + p] = p == 0 ? id_ : static_cast<int32_t>(first_sample + r);
        targets.i32()[r * seq_len_ + p] = id_ * 1000 + p;
        if (doc_ids) doc_ids->i32()[r * seq_len_ + p] = id_;
        if (loss_mask) loss_mask->f32()[r * seq_len_ + p] = static_cast<float>(id_);
      }
    }
  }
  int32_t vocab_size() const override { return vocab_; }
  int seq_len() const override { return seq_len_; }

 private:
  int32_t id_;
  int seq_len_;
  int32_t vocab_;
};

MixtureSource index_mixture(const std::vector<double>& weights, int64_t per_epoch = 0) {
  std::vector<MixtureComponent> components;
  for (size_t k = 0; k < weights.size(); ++k) {
    components.push_back({"source" + std::to_string(k), weights[k],
                          std::make_unique<IndexSource>(static_cast<int32_t>(k)), per_epoch});
  }
  return MixtureSource(std::move(components));
}

struct Rows {
  std::vector<int32_t> tokens, targets, doc_ids;
  std::vector<float> loss_mask;
};

Rows fill(MixtureSource& source, int64_t first, int count) {
  const int seq_len = source.seq_len();
  const size_t n = static_cast<size_t>(count) * static_cast<size_t>(seq_len);
  Rows out{std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<int32_t>(n, -1),
           std::vector<float>(n, -1)};
  const Shape shape{count, seq_len};
  const Tensor doc_ids(out.doc_ids.data(), DType::i32, shape);
  const Tensor loss_mask(out.loss_mask.data(), DType::f32, shape);
  source.fill(first, count, Tensor(out.tokens.data(), DType::i32, shape),
              Tensor(out.targets.data(), DType::i32, shape), &doc_ids, &loss_mask);
  return out;
}

TEST(MixtureSource, SharesStayWithinOneSampleOfTheWeights) {
  for (const std::vector<double>& weights :
       {std::vector<double>{0.8, 0.2}, {0.7, 0.3}, {0.5, 0.3, 0.2}, {3, 1, 1, 7}, {1, 1, 1}}) {
    MixtureSource mixture = index_mixture(weights);
    const std::vector<double> share = mixture.normalised_weights();
    std::vector<int64_t> drawn(weights.size(), 0);
    for (int64_t n = 0; n <= 5000; ++n) {
      for (size_t k = 0; k < weights.size(); ++k) {
        ASSERT_LT(std::abs(static_cast<double>(drawn[k]) - share[k] * static_cast<double>(n)),
                  1.0)
            << "source " << k << " after " << n << " samples, weights " << weights.size();
      }
      // Each source's samples come in order: the next one drawn is number drawn_k.
      const auto [k, index] = mixture.locate(n);
      ASSERT_EQ(index, drawn[static_cast<size_t>(k)]);
      ++drawn[static_cast<size_t>(k)];
    }
    EXPECT_EQ(mixture.drawn_before(5001), drawn);
  }
}

TEST(MixtureSource, EightyTwentyDeliversTheTokenSharesOver200Windows) {
  MixtureSource mixture = index_mixture({0.8, 0.2});
  int64_t tokens[2] = {0, 0};
  for (int64_t first = 0; first < 200; first += 8) {
    const Rows rows = fill(mixture, first, 8);
    for (size_t p = 0; p < rows.tokens.size(); p += 4) tokens[rows.tokens[p]] += 4;
  }
  const double total = static_cast<double>(tokens[0] + tokens[1]);
  EXPECT_EQ(total, 200 * 4);
  EXPECT_NEAR(static_cast<double>(tokens[0]) / total, 0.8, 0.01);
  EXPECT_NEAR(static_cast<double>(tokens[1]) / total, 0.2, 0.01);
}

TEST(MixtureSource, RowsCarryTheSourceTargetsDocIdsAndLossMask) {
  MixtureSource mixture = index_mixture({0.5, 0.5});
  const Rows rows = fill(mixture, 0, 4);
  for (int r = 0; r < 4; ++r) {
    const int32_t id = rows.tokens[r * 4];
    EXPECT_EQ(rows.targets[r * 4 + 2], id * 1000 + 2);
    EXPECT_EQ(rows.doc_ids[r * 4 + 3], id);
    EXPECT_EQ(rows.loss_mask[r * 4 + 1], static_cast<float>(id));
  }
}

TEST(MixtureSource, SampleDataDoesNotDependOnTheReadingOrder) {
  // One reader walks the stream straight; others read it as ranks of a batch, backwards, and
  // by jumping past the snapshot spacing and back (a resume at an arbitrary step).
  constexpr int64_t kSamples = 9000;
  MixtureSource straight = index_mixture({0.6, 0.25, 0.15});
  const Rows all = fill(straight, 0, static_cast<int>(kSamples));
  const auto expect_row = [&](const Rows& got, int64_t sample, int row) {
    for (int p = 0; p < 4; ++p) {
      ASSERT_EQ(got.tokens[row * 4 + p], all.tokens[sample * 4 + p]) << "sample " << sample;
    }
  };
  MixtureSource ranks = index_mixture({0.6, 0.25, 0.15});
  for (int64_t step = 0; step * 8 < kSamples; ++step) {
    for (int rank = 1; rank >= 0; --rank) {
      const int64_t first = step * 8 + rank * 4;
      const Rows got = fill(ranks, first, 4);
      for (int r = 0; r < 4; ++r) expect_row(got, first + r, r);
    }
  }
  MixtureSource jumping = index_mixture({0.6, 0.25, 0.15});
  for (const int64_t sample : {8999, 4096, 4095, 0, 7001, 12, 8192, 8191, 5000}) {
    expect_row(fill(jumping, sample, 1), sample, 0);
  }
  MixtureSource backwards = index_mixture({0.6, 0.25, 0.15});
  for (int64_t sample = kSamples - 1; sample >= 0; sample -= 37) {
    expect_row(fill(backwards, sample, 1), sample, 0);
  }
}

TEST(MixtureSource, CountsCompletedEpochsPerSource) {
  MixtureSource mixture = index_mixture({0.75, 0.25}, 10);
  EXPECT_EQ(mixture.epochs_completed(0), (std::vector<int64_t>{0, 0}));
  // 100 samples: 75 and 25 drawn, so 7 and 2 passes over 10 samples each.
  EXPECT_EQ(mixture.drawn_before(100), (std::vector<int64_t>{75, 25}));
  EXPECT_EQ(mixture.epochs_completed(100), (std::vector<int64_t>{7, 2}));
}

TEST(MixtureSource, EqualMixturesOfSyntheticSourcesGiveEqualBatches) {
  const auto make = [] {
    std::vector<MixtureComponent> components;
    components.push_back({"a", 2.0, std::make_unique<SyntheticData>(100, 8, 1), 0});
    components.push_back({"b", 1.0, std::make_unique<SyntheticData>(100, 8, 2), 0});
    return MixtureSource(std::move(components));
  };
  MixtureSource first = make(), second = make();
  EXPECT_EQ(fill(first, 40, 16).tokens, fill(second, 40, 16).tokens);
  // Weights are rounded to multiples of 2^-32 of the total.
  EXPECT_NEAR(first.normalised_weights()[0], 2.0 / 3.0, 1e-9);
}

TEST(MixtureSource, RefusesBadWeightsAndMismatchedSources) {
  for (const double weight : {0.0, -0.5, std::numeric_limits<double>::quiet_NaN(),
                              std::numeric_limits<double>::infinity()}) {
    testing::expect_error([&] { index_mixture({1.0, weight}); },
                          {"mixture source 'source1'", "weights must be positive"});
  }
  testing::expect_error([] { index_mixture({1.0, 1e-12}); }, {"source1", "too small"});
  testing::expect_error([] { index_mixture({}); }, {"at least one source"});
  const auto pair = [](std::unique_ptr<SampleSource> second) {
    std::vector<MixtureComponent> components;
    components.push_back({"web", 1.0, std::make_unique<IndexSource>(0, 4, 300), 0});
    components.push_back({"code", 1.0, std::move(second), 0});
    return MixtureSource(std::move(components));
  };
  testing::expect_error([&] { pair(std::make_unique<IndexSource>(1, 4, 500)); },
                        {"'web' and 'code' have different vocabularies (300 and 500"});
  testing::expect_error([&] { pair(std::make_unique<IndexSource>(1, 8, 300)); },
                        {"'web' and 'code' have different seq_len (4 and 8)"});
}

}  // namespace
}  // namespace anvil
