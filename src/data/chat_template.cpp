// Chat template rendering. Each template is written out as a sequence of special-token ids and
// text; a SegmentBuilder collects the text between two special tokens (template text with mask
// 0, then at most one assistant reply with mask 1) and encodes it in one encode_ordinary call,
// so the ids equal Hugging Face's tokenization of the rendered string. The mask boundary inside
// a segment is the longest common prefix of the segment's tokens and the tokens of its template
// text alone: a token that straddles template text and the reply counts as the reply's.
#include "data/chat_template.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

constexpr std::string_view kQwen2DefaultSystem = "You are a helpful assistant.";

// Returns true when the UTF-8 character at text[pos] of `length` bytes is whitespace for
// Python's str.isspace (Jinja's trim and Python's strip use that definition).
bool is_python_space(std::string_view text, size_t pos, size_t length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  if (length == 1) {
    const unsigned char c = byte(0);
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  }
  if (length == 2) return byte(0) == 0xc2 && (byte(1) == 0x85 || byte(1) == 0xa0);
  if (length != 3) return false;
  const uint32_t cp = ((byte(0) & 0x0fu) << 12) | ((byte(1) & 0x3fu) << 6) | (byte(2) & 0x3fu);
  return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Returns the byte length of the UTF-8 character starting with `lead` (1 for invalid bytes).
size_t utf8_length(unsigned char lead) {
  if (lead >= 0xf0) return 4;
  if (lead >= 0xe0) return 3;
  if (lead >= 0xc0) return 2;
  return 1;
}

// Strips leading and trailing whitespace as Python's str.strip() does.
std::string python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t length = std::min(utf8_length(text[begin]), text.size() - begin);
    if (!is_python_space(text, begin, length)) break;
    begin += length;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
    const size_t length = end - start;
    if (utf8_length(text[start]) != length || !is_python_space(text, start, length)) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

// Accumulates one rendering: special ids go straight in, text is buffered per segment.
class SegmentBuilder {
 public:
  explicit SegmentBuilder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Appends template or prompt text (loss mask 0).
  void text(std::string_view piece) {
    if (!reply_.empty()) flush();
    text_ += piece;
  }
  // Appends assistant reply text (loss mask 1).
  void reply(std::string_view piece) { reply_ += piece; }
  // Appends a special-token id with the given mask, ending the current segment.
  void special(int32_t id, uint8_t mask) {
    flush();
    out_.tokens.push_back(id);
    out_.loss_mask.push_back(mask);
    at_origin_ = false;
  }
  // Returns the finished rendering.
  RenderedChat finish() {
    flush();
    return std::move(out_);
  }

 private:
  void flush() {
    if (text_.empty() && reply_.empty()) return;
    const std::vector<int32_t> ids = tokenizer_.encode_ordinary(text_ + reply_, at_origin_);
    size_t reply_start = ids.size();
    if (!reply_.empty()) {
      const std::vector<int32_t> prefix =
          text_.empty() ? std::vector<int32_t>{} : tokenizer_.encode_ordinary(text_, at_origin_);
      reply_start = static_cast<size_t>(
          std::mismatch(prefix.begin(), prefix.end(), ids.begin(), ids.end()).first -
          prefix.begin());
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      out_.tokens.push_back(ids[i]);
      out_.loss_mask.push_back(i >= reply_start ? 1 : 0);
    }
    if (!ids.empty()) at_origin_ = false;
    text_.clear();
    reply_.clear();
  }

  const Tokenizer& tokenizer_;
  RenderedChat out_;
  std::string text_;
  std::string reply_;
  bool at_origin_ = true;
};

// Returns the id of a special token the template needs; throws naming the template when absent.
int32_t required_token(const Tokenizer& tok, std::string_view name, ChatTemplate t) {
  const std::optional<int32_t> id = tok.token_id(name);
  ANVIL_CHECK(id.has_value(), "[chat] template {} needs the token {}, which {} does not have",
              chat_template_name(t), name, tok.source_path());
  return *id;
}

int32_t required_bos(const Tokenizer& tok, ChatTemplate t) {
  ANVIL_CHECK(tok.bos_id().has_value(), "[chat] template {} needs a BOS token; {} has none",
              chat_template_name(t), tok.source_path());
  return *tok.bos_id();
}

int32_t required_eos(const Tokenizer& tok, ChatTemplate t) {
  ANVIL_CHECK(tok.eos_id().has_value(), "[chat] template {} needs an EOS token; {} has none",
              chat_template_name(t), tok.source_path());
  return *tok.eos_id();
}

// Checks roles: each is system, user or assistant, and a system message comes first only.
void check_roles(const std::vector<ChatMessage>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    ANVIL_CHECK(role == "system" || role == "user" || role == "assistant",
                "[chat] message {}: unknown role \"{}\" (expected system, user or assistant)",
                i + 1, role);
    ANVIL_CHECK(role != "system" || i == 0,
                "[chat] message {}: a system message must be the first message", i + 1);
  }
}

// Llama 3 Instruct: <|begin_of_text|> then, per message,
// <|start_header_id|>ROLE<|end_header_id|>\n\nTRIMMED CONTENT<|eot_id|>.
RenderedChat render_llama3(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt) {
  const ChatTemplate t = ChatTemplate::llama3;
  const int32_t start_header = required_token(tok, "<|start_header_id|>", t);
  const int32_t end_header = required_token(tok, "<|end_header_id|>", t);
  const int32_t end_of_turn = required_token(tok, "<|eot_id|>", t);
  SegmentBuilder out(tok);
  out.special(required_bos(tok, t), 0);
  for (const ChatMessage& message : messages) {
    const bool assistant = message.role == "assistant";
    out.special(start_header, 0);
    out.text(message.role);
    out.special(end_header, 0);
    out.text("\n\n");
    const std::string content = python_strip(message.content);
    if (assistant) {
      out.reply(content);
    } else {
      out.text(content);
    }
    out.special(end_of_turn, assistant ? 1 : 0);
  }
  if (add_generation_prompt) {
    out.special(start_header, 0);
    out.text("assistant");
    out.special(end_header, 0);
    out.text("\n\n");
  }
  return out.finish();
}

// Qwen2 Instruct (ChatML): per message <|im_start|>ROLE\nCONTENT<|im_end|>\n, with Qwen2's
// default system message when the conversation has none.
RenderedChat render_chatml(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt) {
  const ChatTemplate t = ChatTemplate::chatml;
  const int32_t im_start = required_token(tok, "<|im_start|>", t);
  const int32_t im_end = required_token(tok, "<|im_end|>", t);
  SegmentBuilder out(tok);
  if (messages.empty() || messages.front().role != "system") {
    out.special(im_start, 0);
    out.text("system\n");
    out.text(kQwen2DefaultSystem);
    out.special(im_end, 0);
    out.text("\n");
  }
  for (const ChatMessage& message : messages) {
    const bool assistant = message.role == "assistant";
    out.special(im_start, 0);
    out.text(message.role);
    out.text("\n");
    if (assistant) {
      out.reply(message.content);
    } else {
      out.text(message.content);
    }
    out.special(im_end, assistant ? 1 : 0);
    out.text("\n");
  }
  if (add_generation_prompt) {
    out.special(im_start, 0);
    out.text("assistant\n");
  }
  return out.finish();
}

// Llama 2 chat: <s>[INST] USER [/INST] REPLY </s> per exchange (user and assistant must
// alternate, user first), the system message wrapped in <<SYS>> inside the first [INST].
// There is no generation prompt: a conversation ending on a user turn already ends with
// " [/INST]".
RenderedChat render_llama2(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
  const ChatTemplate t = ChatTemplate::llama2;
  const int32_t bos = required_bos(tok, t);
  const int32_t eos = required_eos(tok, t);
  const bool has_system = !messages.empty() && messages.front().role == "system";
  SegmentBuilder out(tok);
  for (size_t i = has_system ? 1 : 0, turn = 0; i < messages.size(); ++i, ++turn) {
    const ChatMessage& message = messages[i];
    const bool expect_user = turn % 2 == 0;
    ANVIL_CHECK((message.role == "user") == expect_user,
                "[chat] message {}: template llama2 needs user and assistant turns to alternate, "
                "starting with user",
                i + 1);
    std::string content = message.content;
    if (turn == 0 && has_system)
      content = "<<SYS>>\n" + messages.front().content + "\n<</SYS>>\n\n" + content;
    content = python_strip(content);
    if (expect_user) {
      out.special(bos, 0);
      out.text("[INST] " + content + " [/INST]");
    } else {
      out.text(" ");
      out.reply(content + " ");
      out.special(eos, 1);
    }
  }
  return out.finish();
}

// plain: [BOS] then "System: S\n", "User: U\n", and "Assistant: A" + EOS per message; the
// generation prompt is "Assistant:" (the reply's leading space is the model's to produce).
RenderedChat render_plain(const Tokenizer& tok, const std::vector<ChatMessage>& messages,
                          bool add_generation_prompt) {
  const int32_t eos = required_eos(tok, ChatTemplate::plain);
  SegmentBuilder out(tok);
  if (tok.bos_id()) out.special(*tok.bos_id(), 0);
  for (const ChatMessage& message : messages) {
    if (message.role == "assistant") {
      out.text("Assistant:");
      out.reply(" " + message.content);
      out.special(eos, 1);
    } else {
      out.text(message.role == "system" ? "System: " : "User: ");
      out.text(message.content);
      out.text("\n");
    }
  }
  if (add_generation_prompt) out.text("Assistant:");
  return out.finish();
}

}  // namespace

ChatTemplate parse_chat_template(const std::string& name) {
  if (name == "llama3") return ChatTemplate::llama3;
  if (name == "chatml") return ChatTemplate::chatml;
  if (name == "llama2") return ChatTemplate::llama2;
  if (name == "plain") return ChatTemplate::plain;
  ANVIL_FAIL("[chat] unknown chat template \"{}\" (choose llama3, chatml, llama2 or plain)", name);
}

std::string chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::llama3:
      return "llama3";
    case ChatTemplate::chatml:
      return "chatml";
    case ChatTemplate::llama2:
      return "llama2";
    case ChatTemplate::plain:
      return "plain";
  }
  ANVIL_FAIL("[chat] invalid chat template value {}", static_cast<int>(t));
}

ChatTemplate default_chat_template(const Tokenizer& tokenizer, const std::string& model_type) {
  if (tokenizer.token_id("<|start_header_id|>")) return ChatTemplate::llama3;
  if (tokenizer.token_id("<|im_start|>")) return ChatTemplate::chatml;
  if (model_type == "llama" && tokenizer.vocab_size() == 32000 && tokenizer.token_id("<s>"))
    return ChatTemplate::llama2;
  return ChatTemplate::plain;
}

RenderedChat render_chat(ChatTemplate t, const Tokenizer& tok, const std::vector<ChatMessage>& m,
                         bool add_generation_prompt) {
  check_roles(m);
  switch (t) {
    case ChatTemplate::llama3:
      return render_llama3(tok, m, add_generation_prompt);
    case ChatTemplate::chatml:
      return render_chatml(tok, m, add_generation_prompt);
    case ChatTemplate::llama2:
      return render_llama2(tok, m);
    case ChatTemplate::plain:
      return render_plain(tok, m, add_generation_prompt);
  }
  ANVIL_FAIL("[chat] invalid chat template value {}", static_cast<int>(t));
}

std::vector<int32_t> chat_stop_tokens(ChatTemplate t, const Tokenizer& tok) {
  std::vector<int32_t> stops;
  if (t == ChatTemplate::llama3) stops.push_back(required_token(tok, "<|eot_id|>", t));
  if (t == ChatTemplate::chatml) stops.push_back(required_token(tok, "<|im_end|>", t));
  if (tok.eos_id() && std::find(stops.begin(), stops.end(), *tok.eos_id()) == stops.end())
    stops.push_back(*tok.eos_id());
  ANVIL_CHECK(!stops.empty(), "[chat] template {} needs an EOS token; {} has none",
              chat_template_name(t), tok.source_path());
  return stops;
}

}  // namespace anvil
