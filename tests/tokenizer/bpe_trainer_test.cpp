// BPE training: hand-checkable merges and tie-breaking, determinism across thread counts, the
// committed anvil_trained.tokenizer.json as a regression reference (its HF ids are checked in
// fixture_parity_test.cpp), and the result loading and round-tripping in anvil.
#include "core/error.h"
#include "fixture_util.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

nlohmann::json train_json(const std::vector<std::string_view>& texts, int32_t vocab_size,
                          int threads = 1, std::vector<std::string> specials = {"<|endoftext|>"}) {
  BpeTrainOptions options;
  options.vocab_size = vocab_size;
  options.threads = threads;
  options.special_tokens = std::move(specials);
  return nlohmann::json::parse(train_bpe_tokenizer(texts, options));
}

TEST(BpeTrainer, LearnsTheMostFrequentPairFirst) {
  const auto spec = train_json({"abababab"}, 256 + 3 + 1);
  const auto expected = nlohmann::json::parse(R"([["a","b"],["ab","ab"],["abab","abab"]])");
  EXPECT_EQ(spec["model"]["merges"], expected);
  EXPECT_EQ(spec["model"]["vocab"]["abababab"], 258);
  EXPECT_EQ(spec["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(spec["added_tokens"][0]["id"], 259);
}

TEST(BpeTrainer, BreaksTiesBySmallerPair) {
  // Words "ab" and " cd": three pairs seen once each; (' ', 'c') has the smallest ids.
  const auto spec = train_json({"ab cd"}, 256 + 1, 1, {});
  ASSERT_EQ(spec["model"]["merges"].size(), 1u);
  EXPECT_EQ(spec["model"]["merges"][0], nlohmann::json::parse(R"(["Ġ","c"])"));
}

TEST(BpeTrainer, SpecialTokensAreNotTrainedOn) {
  const auto spec = train_json({"<|endoftext|><|endoftext|><|endoftext|>xy"}, 256 + 5, 1);
  ASSERT_EQ(spec["model"]["merges"].size(), 1u);  // only "xy" was left to merge
  EXPECT_EQ(spec["model"]["merges"][0], nlohmann::json::parse(R"(["x","y"])"));
}

TEST(BpeTrainer, SameResultForAnyThreadCount) {
  const std::string corpus = test::read_text(test::fixture_path("train_corpus.txt"));
  ASSERT_GT(corpus.size(), 10000u);
  // Several copies make several counting blocks for the threads to share.
  std::vector<std::string_view> texts(6, corpus);
  BpeTrainOptions options;
  options.vocab_size = 700;
  options.threads = 1;
  const std::string one = train_bpe_tokenizer(texts, options);
  options.threads = 3;
  EXPECT_EQ(train_bpe_tokenizer(texts, options), one);
}

TEST(BpeTrainer, MatchesCommittedReference) {
  // tools/tokenizer_fixtures.py --anvil ... wrote this file with `anvil tokenizer train
  // --vocab-size 600`; a change here means training changed (regenerate it on purpose).
  const std::string corpus = test::read_text(test::fixture_path("train_corpus.txt"));
  BpeTrainOptions options;
  options.vocab_size = 600;
  EXPECT_EQ(train_bpe_tokenizer({corpus}, options),
            test::read_text(test::fixture_path("anvil_trained.tokenizer.json")));
}

TEST(BpeTrainer, ResultLoadsAndRoundTrips) {
  const std::string corpus = test::read_text(test::fixture_path("train_corpus.txt"));
  const std::string invalid = "bytes \xff\xfe and \xe2\x82 broken\n";
  BpeTrainOptions options;
  options.vocab_size = 500;
  BpeTrainStats stats;
  test::ScratchDir dir("train");
  dir.write("tokenizer.json", train_bpe_tokenizer({corpus, invalid}, options, &stats));
  EXPECT_EQ(stats.vocab_size, 500);
  EXPECT_EQ(stats.merges, 500 - 256 - 1);
  EXPECT_GT(stats.unique_words, 1000u);
  const auto tokenizer = Tokenizer::load(dir.path());
  EXPECT_EQ(tokenizer->vocab_size(), 500);
  EXPECT_EQ(tokenizer->eos_id(), 499);
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_EQ(tokenizer->encode("a<|endoftext|>", true).back(), 499);
  for (const std::string& text : {corpus, invalid})
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false)), text);
}

TEST(BpeTrainer, RejectsBadOptions) {
  EXPECT_THROW(train_json({"abc"}, 256), Error);  // no room for the special token
  EXPECT_THROW(train_json({"abc"}, 300, 1, {"<x>", "<x>"}), Error);
  EXPECT_THROW(train_json({"abc"}, 300, 1, {""}), Error);
}

}  // namespace
}  // namespace anvil
