// SFT JSONL records: chat and alpaca forms map to the right messages, every kind of bad record
// is rejected with its reason, and file reading reports file:line (fail) or warns and counts
// (skip), skipping blank lines.
#include <gtest/gtest.h>

#include <fstream>

#include "data/sft_records.h"
#include "data_test_util.h"

namespace anvil {
namespace {

using testing::expect_error;
using testing::TempDir;

TEST(SftRecords, ParsesChatForm) {
  const auto messages = parse_sft_record(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},)"
      R"( {"role": "assistant", "content": "A"}], "id": 7})");
  const std::vector<ChatMessage> expected = {{"system", "S"}, {"user", "Q"}, {"assistant", "A"}};
  EXPECT_EQ(messages, expected);
}

TEST(SftRecords, MapsAlpacaForm) {
  EXPECT_EQ(parse_sft_record(R"({"instruction": "Add", "input": "2 and 3", "output": "5"})"),
            (std::vector<ChatMessage>{{"user", "Add\n\n2 and 3"}, {"assistant", "5"}}));
  EXPECT_EQ(parse_sft_record(R"({"instruction": "Say hi", "input": "", "output": "hi"})"),
            (std::vector<ChatMessage>{{"user", "Say hi"}, {"assistant", "hi"}}));
  EXPECT_EQ(parse_sft_record(R"({"instruction": "Say hi", "output": "hi", "system": "Be nice"})"),
            (std::vector<ChatMessage>{{"system", "Be nice"}, {"user", "Say hi"},
                                      {"assistant", "hi"}}));
}

TEST(SftRecords, RejectsBadRecordsWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": [)", "invalid JSON"},
      {R"([1, 2])", "not an object"},
      {R"({"text": "hello"})", "neither \"messages\""},
      {R"({"messages": {"role": "user"}})", "must be an array"},
      {R"({"messages": [{"content": "x"}, {"role": "assistant", "content": "y"}]})",
       "message 1: missing \"role\""},
      {R"({"messages": [{"role": "bot", "content": "x"}]})", "message 1: unknown role \"bot\""},
      {R"({"messages": [{"role": "user"}]})", "message 1: missing \"content\""},
      {R"({"messages": [{"role": "user", "content": 3}]})", "\"content\" must be a string"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "s"}]})",
       "message 2: a system message must come first"},
      {R"({"messages": [{"role": "user", "content": "only a question"}]})", "no assistant turn"},
      {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": " "}]})",
       "message 2: empty assistant content"},
      {R"({"instruction": "x", "output": ""})", "empty assistant content"},
      {R"({"instruction": "x"})", "without \"output\""},
      {R"({"output": "y"})", "without \"instruction\""},
  };
  for (const auto& [line, reason] : cases)
    expect_error([&] { parse_sft_record(line); }, {"[sft]", reason});
}

TEST(SftRecords, FileErrorsNameTheLineOrAreSkippedAndCounted) {
  TempDir dir;
  const std::string path = dir.file("chat.jsonl");
  std::ofstream(path) << R"({"instruction": "a", "output": "b"})" << "\n\n   \n"
                      << R"({"messages": [{"role": "user", "content": "q"}]})" << "\n"
                      << R"({"instruction": "c", "output": "d"})" << "\n"
                      << "not json\n";
  expect_error([&] { read_sft_records(path, false, nullptr); },
               {"[sft] " + path + ":4: no assistant turn"});
  uint64_t skipped = 0;
  const std::vector<SftRecord> records = read_sft_records(path, true, &skipped);
  EXPECT_EQ(skipped, 2u);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].line, 1u);
  EXPECT_EQ(records[1].line, 5u);
  EXPECT_EQ(records[1].file, path);
  EXPECT_EQ(records[1].messages.back().content, "d");
  expect_error([&] { read_sft_records(dir.file("missing.jsonl"), true, &skipped); },
               {"[data] ", "cannot open", "missing.jsonl"});
}

}  // namespace
}  // namespace anvil
