// `anvil prepare --sft` end to end through the built binary with the llama3_like fixture
// tokenizer: the shards equal the library's renderings with their loss masks, meta.json records
// the template and layout, padding flags reach the output, and each bad input (bad record,
// unknown template, SFT flag without --sft) gives one error line, exit 1 and no output folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "command_runner.h"
#include "data/shard_reader.h"
#include "data/sft.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

const std::string kTokenizer =
    std::string(ANVIL_TEST_DATA) + "/tokenizer/fixtures/llama3_like.tokenizer.json";

using Result = test::CommandResult;
using test::run_anvil;

class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "anvil-prepare-sft-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~Scratch() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

const std::vector<std::vector<ChatMessage>> kConversations = {
    {{"user", "Hi"}, {"assistant", "Hello!"}},
    {{"system", "Be terse."}, {"user", "2+2?"}, {"assistant", "4"}},
    {{"user", "Spell cat"}, {"assistant", "c-a-t"}, {"user", "Backwards?"}, {"assistant", "t-a-c"}},
    {{"user", "Translate 'chat'"}, {"assistant", "« chat » means cat — ça va?"}},
};

std::string write_input(const Scratch& scratch) {
  const std::string path = scratch / "chat.jsonl";
  std::ofstream out(path);
  for (const auto& conversation : kConversations) {
    nlohmann::json messages = nlohmann::json::array();
    for (const ChatMessage& m : conversation)
      messages.push_back({{"role", m.role}, {"content", m.content}});
    out << nlohmann::json{{"messages", messages}}.dump() << "\n";
  }
  out << R"({"instruction": "Name a color", "input": "", "output": "Blue"})" << "\n";
  return path;
}

nlohmann::json read_meta(const std::string& dir) {
  std::ifstream in(dir + "/meta.json");
  return nlohmann::json::parse(in);
}

TEST(PrepareSft, WritesRenderedExamplesWithLossMasks) {
  Scratch scratch;
  const std::string input = write_input(scratch);
  const std::string out = scratch / "sft";
  const Result result = run_anvil("prepare --sft --input " + input + " --tokenizer " + kTokenizer +
                                  " --out " + out + " --split 1,0,0");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("template llama3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("5 examples"), std::string::npos) << result.output;

  const auto tokenizer = Tokenizer::load(kTokenizer);
  std::vector<std::vector<ChatMessage>> all = kConversations;
  all.push_back({{"user", "Name a color"}, {"assistant", "Blue"}});
  ShardReader reader(out + "/train-00000.tok");
  ASSERT_TRUE(reader.has_loss_mask());
  ASSERT_EQ(reader.document_count(), all.size());
  std::vector<int32_t> tokens(reader.token_count());
  reader.read_tokens(0, tokens.size(), tokens.data());
  const auto mask = reader.loss_mask();
  size_t at = 0;
  for (size_t d = 0; d < all.size(); ++d) {
    const RenderedChat r = render_chat(ChatTemplate::llama3, *tokenizer, all[d], false);
    EXPECT_EQ(reader.doc_offsets()[d], at);
    EXPECT_EQ(std::vector<int32_t>(tokens.begin() + at, tokens.begin() + at + r.tokens.size()),
              r.tokens);
    EXPECT_EQ(std::vector<uint8_t>(mask.begin() + at, mask.begin() + at + r.tokens.size()),
              r.loss_mask);
    at += r.tokens.size();
  }
  EXPECT_EQ(at, tokens.size());
  const nlohmann::json meta = read_meta(out);
  EXPECT_EQ(meta.at("sft").at("chat_template"), "llama3");
  EXPECT_EQ(meta.at("sft").at("packing"), true);
}

TEST(PrepareSft, PaddingAndTemplateFlagsReachTheOutput) {
  Scratch scratch;
  const std::string input = write_input(scratch);
  const std::string out = scratch / "padded";
  const Result result =
      run_anvil("prepare --sft --input " + input + " --tokenizer " + kTokenizer + " --out " +
                out + " --split 1,0,0 --chat-template plain --packing false --seq-len 8 " +
                "--max-tokens 100");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json meta = read_meta(out);
  EXPECT_EQ(meta.at("sft").at("chat_template"), "plain");
  EXPECT_EQ(meta.at("sft").at("packing"), false);
  EXPECT_EQ(meta.at("sft").at("seq_len"), 8);
  EXPECT_EQ(meta.at("sft").at("max_tokens"), 100);
  ShardReader reader(out + "/train-00000.tok");
  const auto offsets = reader.doc_offsets();
  for (size_t d = 0; d + 1 < offsets.size(); ++d) EXPECT_EQ((offsets[d + 1] - offsets[d]) % 8, 0u);
  EXPECT_EQ((reader.token_count() - offsets.back()) % 8, 1u);
}

TEST(PrepareSft, BadInputsFailWithOneLineAndNoOutput) {
  Scratch scratch;
  const std::string input = scratch / "bad.jsonl";
  std::ofstream(input) << R"({"instruction": "a", "output": "b"})" << "\n"
                       << R"({"messages": [{"role": "user", "content": "no reply"}]})" << "\n";
  const std::string base = "prepare --sft --input " + input + " --tokenizer " + kTokenizer;
  const std::string out = scratch / "out";

  const Result bad_record = run_anvil(base + " --out " + out);
  EXPECT_EQ(bad_record.exit_code, 1);
  EXPECT_EQ(bad_record.output, "anvil: error: [sft] " + input + ":2: no assistant turn\n");
  EXPECT_FALSE(fs::exists(out));

  const Result unknown = run_anvil(base + " --out " + out + " --chat-template vicuna");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.output.find("llama3, chatml, llama2 or plain"), std::string::npos)
      << unknown.output;
  EXPECT_FALSE(fs::exists(out));

  const Result without_sft =
      run_anvil("prepare --input " + input + " --tokenizer " + kTokenizer + " --out " + out +
                " --max-tokens 10");
  EXPECT_EQ(without_sft.exit_code, 1);
  EXPECT_NE(without_sft.output.find("--max-tokens needs --sft"), std::string::npos)
      << without_sft.output;
  EXPECT_FALSE(fs::exists(out));

  const Result skipped = run_anvil(base + " --out " + out + " --on-error skip --split 1,0,0");
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_NE(skipped.output.find(input + ":2: no assistant turn (record skipped)"),
            std::string::npos)
      << skipped.output;
  EXPECT_NE(skipped.output.find("skipped 1 bad records"), std::string::npos) << skipped.output;
  EXPECT_EQ(read_meta(out).at("bad_records_skipped"), 1);
}

}  // namespace
}  // namespace anvil
