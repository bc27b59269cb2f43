// meta.json as `anvil generate`/`anvil eval` read it to find the tokenizer, and the data
// cursor's integers: hostile files are one error naming the file and the problem.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/cursor.h"
#include "data/dataset_meta.h"
#include "error_message.h"

namespace anvil {
namespace {

using test::error_of;

TEST(DatasetMeta, TokenizerPathIsReadOrNamedAsMissing) {
  EXPECT_EQ(meta_tokenizer_path(R"({"tokenizer": {"path": "t/tokenizer.json"}})", "d/meta.json"),
            "t/tokenizer.json");
  const std::string missing = "[run] d/meta.json: no tokenizer.path string; pass --tokenizer FILE";
  EXPECT_EQ(error_of([] { meta_tokenizer_path(R"({"tokenizer": {"path": 3}})", "d/meta.json"); }),
            missing);
  EXPECT_EQ(error_of([] { meta_tokenizer_path(R"([{"tokenizer": 1}])", "d/meta.json"); }), missing);
  EXPECT_EQ(error_of([] { meta_tokenizer_path(R"({"tokenizer": {"path": ""}})", "d/meta.json"); }),
            "[run] d/meta.json: tokenizer.path is not a file name; pass --tokenizer FILE");
  EXPECT_NE(error_of([] { meta_tokenizer_path("{\"tokenizer\":", "d/meta.json"); })
                .find("[run] d/meta.json is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { meta_tokenizer_path(std::string(100, '[') + std::string(100, ']'),
                                              "d/meta.json"); })
                .find("nests deeper than"),
            std::string::npos);
}

TEST(DataCursor, IntegersThatDoNotFitAreOutOfRange) {
  nlohmann::json cursor = DataCursor{1, 2, 3, "train", "ff", ""}.to_json();
  cursor["seq_len"] = int64_t{1} << 40;
  EXPECT_EQ(error_of([&] { DataCursor::from_json(cursor); }),
            "[data] cursor: field 'seq_len' is out of range: 1099511627776");
  cursor["seq_len"] = 3;
  cursor["seed"] = -1;
  EXPECT_EQ(error_of([&] { DataCursor::from_json(cursor); }),
            "[data] cursor: field 'seed' is out of range: -1");
  cursor["seed"] = 2;
  cursor["next_sample"] = nlohmann::json::parse("9223372036854775808");
  EXPECT_EQ(error_of([&] { DataCursor::from_json(cursor); }),
            "[data] cursor: field 'next_sample' is out of range: 9223372036854775808");
}

}  // namespace
}  // namespace anvil
