// Chat templates: turn a conversation (system/user/assistant messages) into token ids plus a
// per-token loss mask, the same ids Hugging Face's apply_chat_template(..., tokenize=True)
// produces with the real Llama 3 Instruct, Qwen2 Instruct (ChatML) and Llama 2 chat templates.
// Special tokens (BOS, headers, end-of-turn) are inserted as ids; every run of text between two
// special tokens is encoded in one piece with Tokenizer::encode_ordinary, so message content
// that spells a special token ("<|eot_id|>") stays text. Invariant: tokens.size() ==
// loss_mask.size(); loss_mask is 1 exactly on assistant content tokens and on the end-of-turn
// token that closes each assistant turn (docs/formats.md, "SFT datasets", lists each layout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anvil {

class Tokenizer;

enum class ChatTemplate { llama3, chatml, llama2, plain };

// Parses a template name (llama3, chatml, llama2, plain); throws listing the choices.
ChatTemplate parse_chat_template(const std::string& name);
// Returns the template's name as parse_chat_template accepts it.
std::string chat_template_name(ChatTemplate t);
// Picks the default template from the tokenizer's special tokens (<|start_header_id|> ->
// llama3, <|im_start|> -> chatml, [INST]-style llama2 when model_type is "llama" and the
// vocabulary has 32000 ids with <s>, otherwise plain). model_type may be empty (unknown).
ChatTemplate default_chat_template(const Tokenizer& tokenizer, const std::string& model_type);

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
  bool operator==(const ChatMessage&) const = default;
};

struct RenderedChat {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;  // one 0/1 byte per token
};

// Renders a conversation; loss_mask[i] = 1 when token i is an assistant token or the
// end-of-turn token closing an assistant turn. add_generation_prompt appends the assistant
// header. Throws "[chat] ..." on an unknown role, a system message that is not first, roles
// that do not alternate (llama2), or a tokenizer that lacks a special token the template needs.
RenderedChat render_chat(ChatTemplate t, const Tokenizer& tok, const std::vector<ChatMessage>& m,
                         bool add_generation_prompt);

// Returns the ids that end an assistant turn (generation stops on any of them): <|eot_id|>
// (and EOS) for llama3, <|im_end|> for chatml, EOS for llama2 and plain.
std::vector<int32_t> chat_stop_tokens(ChatTemplate t, const Tokenizer& tok);

}  // namespace anvil
