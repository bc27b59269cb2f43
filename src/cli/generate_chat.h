// Chat mode of `anvil generate` (--chat): a multi-turn conversation on stdin/stdout. Each
// line read from stdin is a user turn; the whole history is rendered with the chat template
// (plus the assistant header), prefilled into a fresh KV cache, and the reply is sampled and
// streamed until an end-of-turn token, --max-new-tokens or the end of the context. The reply
// joins the history; end of input ends the session. Piped stdin works the same as a
// terminal (the "> " prompt is shown only on a terminal, on stderr).
#pragma once

#include <iosfwd>
#include <string>

#include "model/hf_config.h"
#include "model/llama.h"
#include "model/sampling.h"
#include "tokenizer/tokenizer.h"

namespace anvil::cli {

struct ChatSettings {
  std::string chat_template;  // empty: default_chat_template(tokenizer, model_type)
  std::string system;         // optional system message opening the conversation
  int max_new_tokens = 200;   // per reply
  int context = 0;            // KV cache length (the model's max_seq)
  SamplingParams sampling;
};

// Runs the conversation until `in` ends; returns the number of replies.
int run_chat(const ChatSettings& settings, LlamaModel& model, const Tokenizer& tokenizer,
             const HfModelConfig& hf, std::istream& in);

}  // namespace anvil::cli
