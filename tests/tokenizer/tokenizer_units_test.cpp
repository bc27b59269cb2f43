// Unit checks of the pieces the parity tests cannot isolate: the byte-level alphabet, UTF-8
// validation, Unicode normalization, invalid-UTF-8 handling, Meta's Llama 3 pre-split and
// added-token matching.
#include <utf8proc.h>

#include <cstdlib>
#include <random>

#include "core/error.h"
#include "fixture_util.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_forms.h"
#include "tokenizer/utf8.h"

namespace anvil {
namespace {

TEST(Utf8, ByteLevelAlphabetIsABijection) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const std::string spelled = tok::bytes_to_byte_level(all_bytes);
  EXPECT_EQ(tok::byte_level_to_bytes(spelled), all_bytes);
  EXPECT_EQ(tok::bytes_to_byte_level(" "), "Ġ");
  EXPECT_EQ(tok::bytes_to_byte_level("\n"), "Ċ");
  EXPECT_EQ(tok::byte_level_to_bytes("▁"), std::nullopt);  // not in the alphabet
}

TEST(Utf8, RejectsMalformedSequences) {
  EXPECT_TRUE(tok::is_valid_utf8("aé€😀"));
  EXPECT_FALSE(tok::is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(tok::is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(tok::is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(tok::is_valid_utf8("abc\xE2\x82"));       // truncated
  EXPECT_TRUE(tok::is_python_space(0x1C));
  EXPECT_FALSE(tok::is_unicode_white_space(0x1C));
  EXPECT_TRUE(tok::is_unicode_white_space(0x3000));
}

// Random bytes (mostly invalid UTF-8) must come back byte for byte from byte-level files.
std::vector<std::pair<size_t, size_t>> matches(const char* pattern, std::string_view text) {
  const tok::Regex regex(pattern, "test");
  std::vector<std::pair<size_t, size_t>> found;
  regex.for_each_match(text, [&](size_t b, size_t e) { found.emplace_back(b, e); });
  return found;
}

// Expected spans are what HF tokenizers' Split (Oniguruma) gives for the same pattern and text.
TEST(RegexDialect, OnigurumaClassesAndAnchors) {
  using Spans = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(matches(R"(\s+$)", "a  \nb  \nc"), (Spans{{1, 3}, {5, 7}}));  // $ at each line end
  EXPECT_EQ(matches(R"(^x)", "x\nx"), (Spans{{0, 1}, {2, 3}}));
  EXPECT_EQ(matches(R"(\h+)", "zz 0f  \t"), (Spans{{3, 5}}));            // \h is a hex digit
  EXPECT_EQ(matches(R"(\s)", "a\u180e\u3000b"), (Spans{{4, 7}}));       // U+180E is not space
  EXPECT_EQ(matches(R"([^\s\p{L}])", "\u180e "), (Spans{{0, 3}}));
  EXPECT_EQ(matches(R"(\w+)", "e\u0301\u203f-x"), (Spans{{0, 6}, {7, 8}}));  // marks, Pc
  EXPECT_EQ(matches(R"([\]\s]+)", "a] \tb"), (Spans{{1, 4}}));
  EXPECT_EQ(tok::to_pcre2_pattern(R"(\Q\s\E\s)", "test"), R"(\Q\s\E\p{White_Space})");
  EXPECT_THROW(tok::to_pcre2_pattern(R"([\W])", "test"), Error);
}

// Strings (fixed edge cases and random mixes of combining marks, Hangul jamo, composites and
// excluded characters) against their NFC form from Python's unicodedata. The fixture's Unicode
// version may be older than utf8proc's: every character in it was assigned long before either,
// and Unicode's stability policy keeps the normalization of assigned characters fixed.
TEST(Nfc, MatchesPythonUnicodedata) {
  const auto root = nlohmann::json::parse(test::read_text(test::fixture_path("nfc.expected.json")));
  size_t changed = 0;
  for (const auto& pair : root.at("cases")) {
    std::string text = pair[0].get<std::string>();
    const std::string expected = pair[1].get<std::string>();
    changed += text != expected;
    tok::normalize_unicode(text, tok::UnicodeForm::kNfc);
    EXPECT_EQ(text, expected) << pair[0].dump() << " (utf8proc Unicode "
                              << tok::unicode_data_version() << ")";
  }
  EXPECT_GT(changed, 50u);  // the cases really exercise composition
}

std::string normalized(std::string text, tok::UnicodeForm form) {
  tok::normalize_unicode(text, form);
  return text;
}

// utf8proc refuses ill-formed UTF-8, so stray bytes stay in place and split the text into runs
// normalized separately: a mark after a stray byte has nothing to compose with.
TEST(UnicodeForms, StrayBytesStayAndSplitRuns) {
  using tok::UnicodeForm;
  EXPECT_EQ(normalized("e\u0301\xff\u0301x\xc3", UnicodeForm::kNfc), "\u00e9\xff\u0301x\xc3");
  EXPECT_EQ(normalized("\xc0\xaf\ufb01\x80\u2460\xed\xa0\x80", UnicodeForm::kNfkc),
            "\xc0\xaf" "fi\x80" "1\xed\xa0\x80");
  EXPECT_EQ(normalized("\u00c5\xf4\x90\x80\x80\u00c5", UnicodeForm::kNfd),
            "A\u030a\xf4\x90\x80\x80" "A\u030a");
  EXPECT_EQ(normalized("\xfe\u2126", UnicodeForm::kNfkd), "\xfe\u03a9");
  // Embedded NULs are code points like any other (a starter that blocks composition).
  EXPECT_EQ(normalized(std::string("A\0\u030a\0A\u030a", 8), UnicodeForm::kNfc),
            std::string("A\0\u030a\0\u00c5", 7));
  EXPECT_EQ(normalized("plain ASCII \x7f", UnicodeForm::kNfkd), "plain ASCII \x7f");
  // Unassigned, private-use and noncharacter code points are well-formed and stay as they are.
  EXPECT_EQ(normalized("\u0378\ue000\ufffe\U0010ffff", UnicodeForm::kNfkc),
            "\u0378\ue000\ufffe\U0010ffff");
}

// normalize_unicode() sends only the pieces between stable code points through utf8proc; the
// result must equal utf8proc's normalization of the whole text. The pool mixes starters that
// compose as a second half (Hangul jamo, Indic and Kannada length marks, kana sound marks),
// marks of several classes, compatibility characters that decompose to marks, and plain text.
TEST(UnicodeForms, PiecewiseMatchesWholeTextUtf8proc) {
  const std::vector<std::string> pool = {
      "a", "e", " ", "\u00e9", "\u0301", "\u0323", "\u0302", "\u0345", "\u1100", "\u1161",
      "\u11a8", "\uac00", "\uac01", "\u0b47", "\u0b3e", "\u0b57", "\u0cbf", "\u0cd5", "\u0cc6",
      "\u0cc2", "\u304b", "\u3099", "\uff76", "\uff9e", "\ufb01", "\u2460", "\u00a8", "\u1fed",
      "\u212b", "\u0958", "\u093c", "\u0915", "\u4e00", "\uf900", "\U00011935", "\U00011930",
      "\u0f71", "\u0f72", "\u0f77", "\u3131", "\u314f", "\u03b1", "\u0313", "\u1fbf", "\u0000"};
  std::mt19937 rng(2026);
  for (auto form : {tok::UnicodeForm::kNfc, tok::UnicodeForm::kNfd, tok::UnicodeForm::kNfkc,
                    tok::UnicodeForm::kNfkd}) {
    const int flags = UTF8PROC_STABLE |
                      (form == tok::UnicodeForm::kNfc || form == tok::UnicodeForm::kNfkc
                           ? UTF8PROC_COMPOSE
                           : UTF8PROC_DECOMPOSE) |
                      (form == tok::UnicodeForm::kNfkc || form == tok::UnicodeForm::kNfkd
                           ? UTF8PROC_COMPAT
                           : 0);
    for (int trial = 0; trial < 2000; ++trial) {
      std::string text;
      const int length = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < length; ++i) {
        const std::string& piece = pool[rng() % pool.size()];
        text += piece.empty() ? std::string(1, '\0') : piece;
      }
      utf8proc_uint8_t* whole = nullptr;
      const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                  static_cast<utf8proc_ssize_t>(text.size()), &whole,
                                  static_cast<utf8proc_option_t>(flags));
      ASSERT_GE(n, 0);
      const std::string expected(reinterpret_cast<const char*>(whole), static_cast<size_t>(n));
      std::free(whole);
      EXPECT_EQ(normalized(text, form), expected) << static_cast<int>(form) << " " << trial;
    }
  }
}

// The tokenizer splits stray bytes out before its normalizer runs, so byte-level BPE behind
// NFKC keeps every byte that is not part of a well-formed character.
TEST(InvalidUtf8, ByteLevelKeepsStrayBytesBesideNormalizedText) {
  const auto tokenizer = Tokenizer::load(test::fixture_path("norm_nfkc.tokenizer.json"));
  const std::string text = "\ufb01\xff\u2460\x80\uff28e\u0301\xc3";
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false)), "fi\xff" "1\x80H\u00e9\xc3");
}

TEST(InvalidUtf8, ByteLevelRoundTripsAnyBytes) {
  std::mt19937 rng(1234);
  for (const char* name : {"llama3_like.tokenizer.json", "gpt2_like.tokenizer.json",
                           "tiktoken.tokenizer.model"}) {
    const auto tokenizer = Tokenizer::load(test::fixture_path(name));
    for (int trial = 0; trial < 50; ++trial) {
      std::string text;
      const int length = static_cast<int>(rng() % 200);
      for (int i = 0; i < length; ++i) {
        const uint32_t r = rng();
        // Mix ASCII words, multi-byte characters, special-token text and stray bytes.
        if (r % 7 == 0) text += "héllo wörld ";
        else if (r % 11 == 0) text += "<|eot_id|>";
        else text.push_back(static_cast<char>(r >> 8));
      }
      EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false)), text) << name << " " << trial;
    }
  }
}

// The Llama 2 layout (Prepend + Replace normalizer, Strip decoder) round-trips valid UTF-8
// text that holds no special-token text and no "▁" (which decodes as a space), unseen
// characters going through byte fallback.
TEST(SentencePiece, RoundTripsValidText) {
  const auto tokenizer = Tokenizer::load(test::fixture_path("sp_like.tokenizer.json"));
  const std::vector<std::string> pool = {"a", "Z", " ", "  ", "\n", "\t", "é", "世", "界",
                                         "😀", "☃", "\u180e", "0", "9", "'s", ".", "\r\n", "ꙮ"};
  std::mt19937 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) text += pool[rng() % pool.size()];
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false)), text) << trial;
  }
}

TEST(InvalidUtf8, SentencePieceUsesByteFallback) {
  const auto tokenizer = Tokenizer::load(test::fixture_path("sp_like.tokenizer.json"));
  const auto ids = tokenizer->encode("ab\xff" "cd", false);
  const auto ff = tokenizer->token_id("<0xFF>");
  ASSERT_TRUE(ff.has_value());
  EXPECT_NE(std::find(ids.begin(), ids.end(), *ff), ids.end());
  // The runs around the stray byte are normalized separately, each getting its own "▁".
  EXPECT_EQ(tokenizer->decode(ids), "ab\xff cd");
}

TEST(MetaPreSplit, CutsLongRunsAndWindows) {
  std::vector<std::pair<size_t, size_t>> cuts;
  auto collect = [&](size_t begin, size_t end) { cuts.emplace_back(begin, end); };
  tok::for_each_meta_chunk(std::string(25000, 'x'), collect);
  EXPECT_EQ(cuts, (std::vector<std::pair<size_t, size_t>>{{0, 25000}}));
  cuts.clear();
  tok::for_each_meta_chunk(std::string(25001, 'x') + "  ", collect);
  EXPECT_EQ(cuts, (std::vector<std::pair<size_t, size_t>>{{0, 25000}, {25000, 25003}}));
  cuts.clear();
  // Lengths count characters, not bytes: 30000 two-byte characters are one 25k cut.
  std::string wide;
  for (int i = 0; i < 30000; ++i) wide += "é";
  tok::for_each_meta_chunk(wide, collect);
  EXPECT_EQ(cuts, (std::vector<std::pair<size_t, size_t>>{{0, 50000}, {50000, 60000}}));
  cuts.clear();
  std::string spaced;
  for (int i = 0; i < 150000; ++i) spaced += "ab ";
  tok::for_each_meta_chunk(spaced, collect);
  EXPECT_EQ(cuts, (std::vector<std::pair<size_t, size_t>>{{0, 400000}, {400000, 450000}}));
}

TEST(AddedTokens, LeftmostLongestWithoutRescanning) {
  std::vector<tok::AddedToken> tokens = {{"ab", 1}, {"abc", 2}, {"bcd", 3}, {"d", 4}};
  std::vector<std::string> patterns = {"ab", "abc", "bcd", "d"};
  const tok::AddedTokenMatcher matcher(tokens, patterns);
  std::vector<std::string> pieces;
  const std::string text = "xabcdab";
  matcher.split(
      text, [&](size_t b, size_t e) { pieces.push_back(text.substr(b, e - b)); },
      [&](int32_t id) { pieces.push_back(fmt::format("#{}", id)); });
  EXPECT_EQ(pieces, (std::vector<std::string>{"x", "#2", "#4", "#1"}));
}

TEST(AddedTokens, StripAndSingleWordFlags) {
  tok::AddedToken mask{"<m>", 7};
  mask.lstrip = true;
  mask.rstrip = true;
  tok::AddedToken cat{"cat", 8};
  cat.single_word = true;
  const tok::AddedTokenMatcher matcher({mask, cat}, {"<m>", "cat"});
  std::vector<std::string> pieces;
  const std::string text = "a  <m>\t b cat concat";
  matcher.split(
      text, [&](size_t b, size_t e) { pieces.push_back(text.substr(b, e - b)); },
      [&](int32_t id) { pieces.push_back(fmt::format("#{}", id)); });
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "#7", "b ", "#8", " concat"}));
}

}  // namespace
}  // namespace anvil
