// Meta's real Llama 3 tokenizer.model, when it is installed (never committed): the PyPI package
// llama-models ships it, and `python3 tools/tokenizer_fixtures.py --install-llama3` extracts it
// to ~/.cache/anvil/llama3/tokenizer.model (or set ANVIL_LLAMA3_TOKENIZER). The expected ids in
// llama3_real.expected.json come from tiktoken with Meta's encode logic; without the file the
// test is skipped with a message saying how to install it.
#include <cstdlib>

#include "fixture_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

std::string llama3_model_path() {
  if (const char* path = std::getenv("ANVIL_LLAMA3_TOKENIZER"); path && *path) return path;
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.cache/anvil/llama3/tokenizer.model" : "";
}

TEST(Llama3Real, MatchesTiktokenWithMetaSplitting) {
  const std::string path = llama3_model_path();
  if (path.empty() || !std::filesystem::exists(path))
    GTEST_SKIP() << "Llama 3 tokenizer.model not installed; run python3 "
                    "tools/tokenizer_fixtures.py --install-llama3";
  const auto tokenizer = Tokenizer::load(path);
  EXPECT_EQ(tokenizer->vocab_size(), 128256);
  EXPECT_EQ(tokenizer->bos_id(), 128000);
  EXPECT_EQ(tokenizer->eos_id(), 128001);
  EXPECT_EQ(tokenizer->token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tokenizer->token_id("<|start_header_id|>"), 128006);

  const test::ExpectedFile expected = test::load_expected("llama3_real");
  for (const test::ExpectedCase& c : expected.cases) {
    const auto ids = tokenizer->encode(c.text, false);
    const auto ids_special = tokenizer->encode(c.text, true);
    if (c.ids) {
      EXPECT_EQ(ids, *c.ids) << c.name;
      EXPECT_EQ(ids_special, *c.ids_special) << c.name;
    } else {
      EXPECT_EQ(ids.size(), c.ids_len) << c.name;
      EXPECT_EQ(test::fnv1a(ids), c.ids_fnv) << c.name;
      EXPECT_EQ(test::fnv1a(ids_special), c.ids_special_fnv) << c.name;
    }
    EXPECT_EQ(tokenizer->decode(ids), c.text) << c.name;
  }
}

}  // namespace
}  // namespace anvil
