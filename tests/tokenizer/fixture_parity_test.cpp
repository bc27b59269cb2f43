// Parity with the reference libraries: every fixture tokenizer (trained and saved by HF
// `tokenizers`, or a tiktoken file checked against `tiktoken`) must give exactly the ids the
// library gave, with and without special tokens, and decode as HF decodes. Byte-level
// tokenizers must also round-trip every text exactly. The norm_* fixtures put one tiny
// byte-level BPE behind each Unicode normalizer (NFC, NFD, NFKC, NFKD, a Sequence).
#include <thread>

#include "fixture_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

struct ParityCase {
  const char* name;
  bool byte_level;  // decode(encode(x)) == x for every text
};

class FixtureParity : public ::testing::TestWithParam<ParityCase> {};

void expect_ids(const test::ExpectedCase& c, const std::vector<int32_t>& got,
                const std::optional<std::vector<int32_t>>& want, size_t want_len,
                const std::string& want_fnv, const char* what) {
  if (want) {
    EXPECT_EQ(got, *want) << c.name << " (" << what << ")";
  } else {
    EXPECT_EQ(got.size(), want_len) << c.name << " (" << what << ")";
    EXPECT_EQ(test::fnv1a(got), want_fnv) << c.name << " (" << what << ")";
  }
}

TEST_P(FixtureParity, MatchesReferenceIdsAndDecode) {
  const ParityCase param = GetParam();
  const test::ExpectedFile expected = test::load_expected(param.name);
  const auto tokenizer = Tokenizer::load(test::fixture_path(expected.tokenizer));
  ASSERT_GE(expected.cases.size(), 15u);
  for (const test::ExpectedCase& c : expected.cases) {
    const std::vector<int32_t> ids = tokenizer->encode(c.text, false);
    if (c.gap_ids) {
      // Characters newer than HF's Unicode tables: pin both sides of the known difference.
      EXPECT_NE(ids, *c.ids) << c.name << ": HF's older Unicode tables now agree; regenerate";
      EXPECT_EQ(ids, *c.gap_ids) << c.name << " (no special, unicodedata)";
      EXPECT_EQ(tokenizer->encode(c.text, true), *c.gap_ids_special) << c.name;
      continue;
    }
    expect_ids(c, ids, c.ids, c.ids_len, c.ids_fnv, "no special");
    expect_ids(c, tokenizer->encode(c.text, true), c.ids_special, c.ids_special_len,
               c.ids_special_fnv, "add_special");
    if (c.decoded) {
      EXPECT_EQ(tokenizer->decode(ids), *c.decoded) << c.name;
    }
    // lstrip/rstrip tokens absorb the whitespace beside them, so those texts cannot round-trip.
    if (param.byte_level && !c.name.starts_with("added_")) {
      EXPECT_EQ(tokenizer->decode(ids), c.text) << c.name;
    }
  }
}

TEST_P(FixtureParity, ConcurrentEncodesAgree) {
  const test::ExpectedFile expected = test::load_expected(GetParam().name);
  const auto tokenizer = Tokenizer::load(test::fixture_path(expected.tokenizer));
  std::vector<std::vector<int32_t>> serial;
  for (const auto& c : expected.cases) serial.push_back(tokenizer->encode(c.text, true));
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < expected.cases.size(); ++i) {
          const size_t k = (i + static_cast<size_t>(t)) % expected.cases.size();
          if (tokenizer->encode(expected.cases[k].text, true) != serial[k]) ++mismatches[t];
        }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureParity,
                         ::testing::Values(ParityCase{"llama3_like", true},
                                           ParityCase{"gpt2_like", true},
                                           ParityCase{"sp_like", false},
                                           ParityCase{"sp_metaspace", false},
                                           ParityCase{"qwen2_like", false},  // NFC rewrites
                                           ParityCase{"norm_nfc", false},
                                           ParityCase{"norm_nfd", false},
                                           ParityCase{"norm_nfkc", false},
                                           ParityCase{"norm_nfkd", false},
                                           ParityCase{"norm_nfkd_strip", false},
                                           ParityCase{"tiktoken", true},
                                           ParityCase{"anvil_trained", true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FixtureFacts, Llama3LikeSpecialsAndBos) {
  const auto tokenizer = Tokenizer::load(test::fixture_path("llama3_like.tokenizer.json"));
  EXPECT_EQ(tokenizer->vocab_size(), 1500 + 256);
  EXPECT_EQ(tokenizer->bos_id(), 1500);
  EXPECT_EQ(tokenizer->eos_id(), 1501);
  EXPECT_EQ(tokenizer->token_id("<|eot_id|>"), 1509);
  EXPECT_TRUE(tokenizer->is_special(1509));
  EXPECT_FALSE(tokenizer->is_special(100));
  EXPECT_EQ(tokenizer->special_prefix(), std::vector<int32_t>{1500});
  EXPECT_EQ(tokenizer->fingerprint().size(), 16u);
}

TEST(FixtureFacts, TiktokenFileLayout) {
  const auto tokenizer = Tokenizer::load(test::fixture_path("tiktoken.tokenizer.model"));
  EXPECT_EQ(tokenizer->vocab_size(), 1500 + 256);
  EXPECT_EQ(tokenizer->bos_id(), 1500);
  EXPECT_EQ(tokenizer->eos_id(), 1501);
  EXPECT_EQ(tokenizer->token_id("<|python_tag|>"), 1510);
  EXPECT_EQ(tokenizer->token_id("<|reserved_special_token_247|>"), 1755);
  EXPECT_EQ(tokenizer->token_id("a"), tokenizer->encode("a", false).at(0));
}

TEST(FixtureFacts, SentencePieceBosEosAndFallback) {
  const auto tokenizer = Tokenizer::load(test::fixture_path("sp_like.tokenizer.json"));
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  const auto snowman = tokenizer->encode("☃", false);  // not in the trained alphabet
  ASSERT_EQ(snowman.size(), 4u);  // "▁" then the three UTF-8 bytes as <0xXX>
  EXPECT_EQ(snowman[1], tokenizer->token_id("<0xE2>"));
  EXPECT_EQ(tokenizer->decode(snowman), "☃");
}

TEST(FixtureFacts, TokenizerLoadsFromDirectory) {
  test::ScratchDir dir("dir");
  dir.write("tokenizer.model", test::read_text(test::fixture_path("tiktoken.tokenizer.model")));
  const auto from_model = Tokenizer::load(dir.path());
  EXPECT_EQ(from_model->source_path(), dir.file("tokenizer.model"));
  dir.write("tokenizer.json", test::read_text(test::fixture_path("llama3_like.tokenizer.json")));
  const auto from_json = Tokenizer::load(dir.path());
  EXPECT_EQ(from_json->source_path(), dir.file("tokenizer.json"));
  EXPECT_EQ(from_json->encode("Hello world", true), from_model->encode("Hello world", true));
}

TEST(FixtureFacts, TokenizerConfigNamesEos) {
  test::ScratchDir dir("config");
  dir.write("tokenizer.json", test::read_text(test::fixture_path("llama3_like.tokenizer.json")));
  dir.write("tokenizer_config.json",
            R"({"bos_token": null, "eos_token": {"content": "<|eot_id|>"}})");
  const auto tokenizer = Tokenizer::load(dir.path());
  EXPECT_EQ(tokenizer->bos_id(), std::nullopt);
  EXPECT_EQ(tokenizer->eos_id(), 1509);
}

}  // namespace
}  // namespace anvil
