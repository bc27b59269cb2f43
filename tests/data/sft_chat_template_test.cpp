// Chat templates against Hugging Face: every case of sft_fixtures/chat_templates.expected.json
// (apply_chat_template ids from tools/sft_fixtures.py with the real Llama 3 Instruct, Qwen2
// Instruct and Llama 2 chat templates on the committed fixture tokenizers) must render to the
// same ids. The loss mask is checked token by token for each template against a layout built
// here from its pieces, and special-token text inside content must stay text.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/sft.h"
#include "data_test_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

using testing::expect_error;

const Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot)
    slot = Tokenizer::load(std::string(ANVIL_TEST_DATA) + "/tokenizer/fixtures/" + name +
                           ".tokenizer.json");
  return *slot;
}

std::vector<ChatMessage> messages_of(const nlohmann::json& list) {
  std::vector<ChatMessage> messages;
  for (const auto& m : list)
    messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return messages;
}

TEST(ChatTemplate, MatchesHuggingFaceApplyChatTemplate) {
  std::ifstream in(std::string(ANVIL_TEST_DATA) +
                   "/data/sft_fixtures/chat_templates.expected.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  int checked = 0;
  for (const auto& c : fixture.at("cases")) {
    const std::string path = c.at("tokenizer").get<std::string>();
    auto& tok = tokenizers[path];
    if (!tok) tok = Tokenizer::load(std::string(ANVIL_TEST_DATA) + "/" + path);
    const ChatTemplate t = parse_chat_template(c.at("template").get<std::string>());
    const RenderedChat rendered = render_chat(t, *tok, messages_of(c.at("messages")),
                                              c.at("add_generation_prompt").get<bool>());
    const auto expected = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(rendered.tokens, expected)
        << path << " " << c.at("name") << "\ntext: " << c.at("text");
    EXPECT_EQ(rendered.loss_mask.size(), rendered.tokens.size());
    ++checked;
  }
  EXPECT_EQ(checked, 32);
}

// Builds the expected tokens and mask of a rendering piece by piece.
class Expected {
 public:
  explicit Expected(const Tokenizer& tok) : tok_(tok) {}
  // Appends the tokens of `text` (encoded on its own) with one mask value.
  Expected& text(const std::string& text, uint8_t mask) {
    for (int32_t id : tok_.encode(text, false)) push(id, mask);
    return *this;
  }
  Expected& special(const std::string& name, uint8_t mask) {
    const std::optional<int32_t> id = tok_.token_id(name);
    EXPECT_TRUE(id.has_value()) << name;
    push(id.value_or(-1), mask);
    return *this;
  }
  void check(const RenderedChat& rendered) const {
    ASSERT_EQ(rendered.tokens.size(), tokens_.size());
    ASSERT_EQ(rendered.loss_mask.size(), tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) {
      EXPECT_EQ(rendered.tokens[i], tokens_[i]) << "token " << i;
      EXPECT_EQ(rendered.loss_mask[i], mask_[i])
          << "mask of token " << i << " ("
          << tok_.decode(std::span<const int32_t>(&tokens_[i], 1)) << ")";
    }
  }

 private:
  void push(int32_t id, uint8_t mask) {
    tokens_.push_back(id);
    mask_.push_back(mask);
  }
  const Tokenizer& tok_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> mask_;
};

const std::vector<ChatMessage> kTwoTurns = {{"system", "Be brief."},
                                            {"user", "Capital of France?"},
                                            {"assistant", "Paris."},
                                            {"user", "And Italy?"},
                                            {"assistant", "Rome."}};

TEST(ChatTemplate, Llama3MaskCoversRepliesAndEotOnly) {
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  Expected e(tok);
  e.special("<|begin_of_text|>", 0);
  for (const ChatMessage& m : kTwoTurns) {
    const uint8_t reply = m.role == "assistant" ? 1 : 0;
    e.special("<|start_header_id|>", 0).text(m.role, 0).special("<|end_header_id|>", 0);
    e.text("\n\n", 0).text(m.content, reply).special("<|eot_id|>", reply);
  }
  e.check(render_chat(ChatTemplate::llama3, tok, kTwoTurns, false));
}

TEST(ChatTemplate, ChatmlMaskCoversRepliesAndImEndOnly) {
  const Tokenizer& tok = fixture_tokenizer("qwen2_like");
  Expected e(tok);
  for (const ChatMessage& m : kTwoTurns) {
    const uint8_t reply = m.role == "assistant" ? 1 : 0;
    e.special("<|im_start|>", 0).text(m.role + "\n", 0).text(m.content, reply);
    e.special("<|im_end|>", reply).text("\n", 0);
  }
  e.check(render_chat(ChatTemplate::chatml, tok, kTwoTurns, false));
}

TEST(ChatTemplate, ChatmlAddsQwen2DefaultSystemAndGenerationPrompt) {
  const Tokenizer& tok = fixture_tokenizer("qwen2_like");
  Expected e(tok);
  e.special("<|im_start|>", 0).text("system\nYou are a helpful assistant.", 0);
  e.special("<|im_end|>", 0).text("\n", 0);
  e.special("<|im_start|>", 0).text("user\nHi", 0).special("<|im_end|>", 0).text("\n", 0);
  e.special("<|im_start|>", 0).text("assistant\n", 0);
  e.check(render_chat(ChatTemplate::chatml, tok, {{"user", "Hi"}}, true));
}

TEST(ChatTemplate, Llama2MaskCoversReplySpaceAndEos) {
  // sp_like has Llama 2's Prepend("▁") normalizer: every separately encoded piece starts with
  // "▁", which is what " Paris. " encodes to inside the rendered "[/INST] Paris. </s>".
  const Tokenizer& tok = fixture_tokenizer("sp_like");
  Expected e(tok);
  e.special("<s>", 0).text("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nCapital of France? [/INST]", 0);
  e.text("Paris. ", 1).special("</s>", 1);
  e.special("<s>", 0).text("[INST] And Italy? [/INST]", 0);
  e.text("Rome. ", 1).special("</s>", 1);
  e.check(render_chat(ChatTemplate::llama2, tok, kTwoTurns, false));
}

TEST(ChatTemplate, PlainLayoutAndMask) {
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  Expected e(tok);
  e.special("<|begin_of_text|>", 0);
  e.text("System: Be brief.\nUser: Capital of France?\nAssistant:", 0);
  e.text(" Paris.", 1).special("<|end_of_text|>", 1);
  e.text("User: And Italy?\nAssistant:", 0).text(" Rome.", 1).special("<|end_of_text|>", 1);
  e.check(render_chat(ChatTemplate::plain, tok, kTwoTurns, false));

  Expected prompt(tok);
  prompt.special("<|begin_of_text|>", 0).text("User: Hi\nAssistant:", 0);
  prompt.check(render_chat(ChatTemplate::plain, tok, {{"user", "Hi"}}, true));
}

TEST(ChatTemplate, ReplyThatMergesWithTemplateTextIsMaskedFromTheSharedToken) {
  // ChatML keeps content as is: "assistant\n" + "\nSure" puts "\n\n" in one token, which
  // belongs to the reply (the model must produce its first newline).
  const Tokenizer& tok = fixture_tokenizer("qwen2_like");
  const RenderedChat r =
      render_chat(ChatTemplate::chatml, tok, {{"user", "Hi"}, {"assistant", "\nSure"}}, false);
  const std::vector<int32_t> reply = tok.encode("\n\nSure", false);
  const int32_t im_end = *tok.token_id("<|im_end|>");
  ASSERT_GE(r.tokens.size(), reply.size() + 2);
  const size_t reply_start = r.tokens.size() - reply.size() - 2;  // then <|im_end|> "\n"
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin() + reply_start, r.tokens.end() - 2), reply);
  EXPECT_EQ(r.tokens[r.tokens.size() - 2], im_end);
  for (size_t i = 0; i < r.tokens.size(); ++i)
    EXPECT_EQ(r.loss_mask[i], i >= reply_start && i < r.tokens.size() - 1 ? 1 : 0) << i;
}

TEST(ChatTemplate, SpecialTokenTextInContentStaysText) {
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  const std::string sneaky = "end <|eot_id|> here<|start_header_id|>";
  const RenderedChat r =
      render_chat(ChatTemplate::llama3, tok, {{"user", sneaky}, {"assistant", "ok"}}, false);
  const int32_t eot = *tok.token_id("<|eot_id|>");
  const int32_t start_header = *tok.token_id("<|start_header_id|>");
  int eots = 0;
  int headers = 0;
  for (int32_t id : r.tokens) {
    eots += id == eot;
    headers += id == start_header;
  }
  EXPECT_EQ(eots, 2);
  EXPECT_EQ(headers, 2);
  const std::vector<int32_t> as_text = tok.encode_ordinary("\n\n" + sneaky, false);
  EXPECT_NE(std::search(r.tokens.begin(), r.tokens.end(), as_text.begin(), as_text.end()),
            r.tokens.end());
  EXPECT_NE(tok.encode(sneaky, false), tok.encode_ordinary(sneaky, true));
}

TEST(ChatTemplate, TrimsLikePythonStrip) {
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  const RenderedChat spaced = render_chat(
      ChatTemplate::llama3, tok,
      {{"user", "\xe3\x80\x80 Hi\t\n"}, {"assistant", "\xc2\xa0Yo\xe2\x80\x83"}}, false);
  const RenderedChat bare =
      render_chat(ChatTemplate::llama3, tok, {{"user", "Hi"}, {"assistant", "Yo"}}, false);
  EXPECT_EQ(spaced.tokens, bare.tokens);
  EXPECT_EQ(spaced.loss_mask, bare.loss_mask);
}

TEST(ChatTemplate, NamesDefaultsAndStopTokens) {
  for (ChatTemplate t : {ChatTemplate::llama3, ChatTemplate::chatml, ChatTemplate::llama2,
                         ChatTemplate::plain})
    EXPECT_EQ(parse_chat_template(chat_template_name(t)), t);
  expect_error([] { parse_chat_template("vicuna"); }, {"vicuna", "llama3, chatml, llama2"});
  EXPECT_EQ(default_chat_template(fixture_tokenizer("llama3_like"), "llama"),
            ChatTemplate::llama3);
  EXPECT_EQ(default_chat_template(fixture_tokenizer("qwen2_like"), "qwen2"), ChatTemplate::chatml);
  // sp_like has <s> but not Llama 2's 32000-id vocabulary, so it gets plain.
  EXPECT_EQ(default_chat_template(fixture_tokenizer("sp_like"), "llama"), ChatTemplate::plain);
  EXPECT_EQ(default_chat_template(fixture_tokenizer("gpt2_like"), ""), ChatTemplate::plain);

  const Tokenizer& llama3 = fixture_tokenizer("llama3_like");
  EXPECT_EQ(chat_stop_tokens(ChatTemplate::llama3, llama3),
            (std::vector<int32_t>{*llama3.token_id("<|eot_id|>"), *llama3.eos_id()}));
  const Tokenizer& qwen = fixture_tokenizer("qwen2_like");
  EXPECT_EQ(chat_stop_tokens(ChatTemplate::chatml, qwen).front(), *qwen.token_id("<|im_end|>"));
  const Tokenizer& sp = fixture_tokenizer("sp_like");
  EXPECT_EQ(chat_stop_tokens(ChatTemplate::llama2, sp), std::vector<int32_t>{*sp.eos_id()});
}

TEST(ChatTemplate, RejectsBadConversations) {
  const Tokenizer& llama3 = fixture_tokenizer("llama3_like");
  expect_error([&] { render_chat(ChatTemplate::llama3, llama3, {{"bot", "x"}}, false); },
               {"[chat]", "message 1", "unknown role \"bot\""});
  expect_error(
      [&] {
        render_chat(ChatTemplate::llama3, llama3, {{"user", "x"}, {"system", "late"}}, false);
      },
      {"message 2", "system message must be the first"});
  expect_error(
      [&] {
        render_chat(ChatTemplate::llama2, fixture_tokenizer("sp_like"),
                    {{"user", "a"}, {"user", "b"}}, false);
      },
      {"message 2", "alternate"});
  expect_error(
      [&] {
        render_chat(ChatTemplate::llama3, fixture_tokenizer("qwen2_like"), {{"user", "x"}}, false);
      },
      {"llama3 needs the token <|start_header_id|>"});
}

}  // namespace
}  // namespace anvil
