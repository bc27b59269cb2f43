// Hostile tokenizer files found by fuzz/tiktoken_fuzz and fuzz/tokenizer_json_fuzz (inputs kept
// in fuzz/regressions/): a rank past the file's line count or an id far past the entry count
// is an error before any table is sized, and a pipeline component missing a key is one error
// line naming the file.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "tokenizer/loaders.h"
#include "error_message.h"

namespace anvil {
namespace {

using test::error_of;

TEST(HostileTokenizer, TiktokenRankPastTheLineCountIsAnError) {
  EXPECT_EQ(error_of([] { tok::load_tiktoken("t.model", "IQ== 0\nIg== 2000000000\n"); }),
            "[tokenizer] t.model: line 2 has rank 2000000000, but the file has only 3 lines "
            "(ranks must be 0..n-1)");
}

TEST(HostileTokenizer, ComponentMissingAKeyNamesTheFile) {
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                               "pre_tokenizer": {"type": "Sequence"}})";
  const std::string message = error_of([&] { tok::load_hf_json("t.json", json); });
  EXPECT_EQ(message.rfind("[tokenizer] t.json: ", 0), 0u) << message;
  EXPECT_NE(message.find("pretokenizers"), std::string::npos) << message;
}

TEST(HostileTokenizer, IdFarPastTheEntriesIsOutOfRangeBeforeAllocating) {
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2000000000},
                               "merges": []}})";
  EXPECT_EQ(error_of([&] { tok::load_hf_json("t.json", json); }),
            "[tokenizer] t.json: token id 2000000000 is out of range for 2 vocab and added tokens");
}

TEST(HostileTokenizer, PostProcessorIdsAreInRangeAndNameTokens) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []})";
  auto with_cls = [&](const std::string& id) {
    return "{" + model + R"(, "post_processor": {"type": "BertProcessing", "cls": ["a", )" + id +
           R"(], "sep": ["b", 1]}})";
  };
  // Past 32 bits: reported as written, not wrapped to 1.
  EXPECT_EQ(error_of([&] { tok::load_hf_json("t.json", with_cls("4294967297")); }),
            "[tokenizer] t.json: post_processor token id 4294967297 is out of range");
  EXPECT_EQ(error_of([&] { tok::load_hf_json("t.json", with_cls("-1")); }),
            "[tokenizer] t.json: post_processor token id -1 is out of range");
  EXPECT_EQ(error_of([&] { tok::load_hf_json("t.json", with_cls("7")); }),
            "[tokenizer] t.json: post_processor token id 7 names no token");
  EXPECT_NO_THROW(tok::load_hf_json("t.json", with_cls("0")));
}

}  // namespace
}  // namespace anvil
