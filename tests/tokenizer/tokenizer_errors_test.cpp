// Failure modes: every unsupported or broken input is one anvil::Error that names the problem
// and the file, never a crash and never a silently different tokenization.
#include "core/error.h"
#include "fixture_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

// Expects Tokenizer::load(path) to throw an Error whose message holds every `parts` string.
void expect_load_error(const std::string& path, const std::vector<std::string>& parts) {
  try {
    Tokenizer::load(path);
    ADD_FAILURE() << "loading " << path << " did not throw";
  } catch (const Error& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
  }
}

// Writes llama3_like.tokenizer.json with one JSON member replaced, returns its path.
std::string edited_llama3(const test::ScratchDir& dir, const std::string& pointer,
                          const nlohmann::json& value) {
  auto spec = nlohmann::json::parse(
      test::read_text(test::fixture_path("llama3_like.tokenizer.json")));
  spec[nlohmann::json::json_pointer(pointer)] = value;
  dir.write("tokenizer.json", spec.dump());
  return dir.file("tokenizer.json");
}

TEST(TokenizerErrors, MissingFileAndEmptyDirectory) {
  expect_load_error("/nonexistent/tokenizer.json", {"/nonexistent/tokenizer.json", "no such file"});
  test::ScratchDir dir("empty");
  expect_load_error(dir.path(), {dir.path(), "neither tokenizer.json nor tokenizer.model"});
}

TEST(TokenizerErrors, MalformedJson) {
  test::ScratchDir dir("malformed");
  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, )");
  expect_load_error(dir.file("tokenizer.json"), {dir.file("tokenizer.json"), "malformed JSON"});
  dir.write("other.json", R"({"version": "1.0"})");
  expect_load_error(dir.file("other.json"), {"no 'model' object"});
}

TEST(TokenizerErrors, UnsupportedModelTypes) {
  expect_load_error(test::fixture_path("unigram.tokenizer.json"),
                    {"unigram.tokenizer.json", "unsupported model type 'Unigram'"});
  expect_load_error(test::fixture_path("wordpiece.tokenizer.json"),
                    {"wordpiece.tokenizer.json", "unsupported model type 'WordPiece'"});
}

TEST(TokenizerErrors, UnsupportedPipelineStages) {
  test::ScratchDir dir("stages");
  expect_load_error(edited_llama3(dir, "/normalizer", {{"type", "Lowercase"}}),
                    {"tokenizer.json", "unsupported normalizer type 'Lowercase'"});
  expect_load_error(edited_llama3(dir, "/pre_tokenizer", {{"type", "Whitespace"}}),
                    {"unsupported pre_tokenizer type 'Whitespace'"});
  expect_load_error(edited_llama3(dir, "/decoder", {{"type", "WordPiece"}, {"prefix", "##"}}),
                    {"unsupported decoder type 'WordPiece'"});
  expect_load_error(edited_llama3(dir, "/post_processor", {{"type", "Mystery"}}),
                    {"unsupported post_processor type 'Mystery'"});
  expect_load_error(edited_llama3(dir, "/model/dropout", 0.1), {"dropout"});
  expect_load_error(edited_llama3(dir, "/model/continuing_subword_prefix", "##"),
                    {"continuing_subword_prefix"});
  expect_load_error(edited_llama3(dir, "/model/merges/0", nlohmann::json::array({"Ġ", "zzz"})),
                    {"merge 0", "missing from the vocab"});
  expect_load_error(edited_llama3(dir, "/pre_tokenizer/pretokenizers/0/pattern",
                                  {{"Regex", "(unclosed"}}),
                    {"cannot compile regex"});
}

TEST(TokenizerErrors, BadTiktokenFiles) {
  test::ScratchDir dir("tiktoken");
  dir.write("sp.model", std::string("\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00", 14));
  expect_load_error(dir.file("sp.model"), {"sp.model", "SentencePiece"});
  dir.write("gap.model", "YQ== 0\nYg== 2\n");
  expect_load_error(dir.file("gap.model"), {"gap.model", "rank 1 is missing"});
  dir.write("dup.model", "YQ== 0\nYQ== 1\n");
  expect_load_error(dir.file("dup.model"), {"dup.model", "repeats"});
}

TEST(TokenizerErrors, DecodeRejectsIdsWithoutTokens) {
  const auto tokenizer = Tokenizer::load(test::fixture_path("llama3_like.tokenizer.json"));
  const std::vector<int32_t> too_big = {1, tokenizer->vocab_size()};
  EXPECT_THROW(tokenizer->decode(too_big), Error);
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(tokenizer->decode(negative), Error);
  try {
    tokenizer->decode(too_big);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anvil
