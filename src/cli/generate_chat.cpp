// Chat mode (see generate_chat.h). Re-rendering the whole history each turn keeps the token
// sequence exactly what the template defines (the reply as the template writes it, not as it
// was sampled), at the cost of re-running the prefix: cheap next to the decoding steps.
#include "cli/generate_chat.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <istream>
#include <span>
#include <vector>

#include "core/error.h"
#include "data/chat_template.h"
#include "eval/generation.h"
#include "model/kv_cache.h"

namespace anvil::cli {
namespace {

// Returns the reply to the conversation of `prompt` (tokens ending in the assistant header),
// streamed to stdout as it is sampled.
std::string reply(LlamaModel& model, KvCache& cache, Sampler& sampler, const Tokenizer& tokenizer,
                  const std::vector<int32_t>& prompt, const std::vector<int32_t>& stop_ids,
                  int max_new_tokens) {
  GenerationLimits limits;
  limits.max_new_tokens = max_new_tokens;
  limits.stop_ids = stop_ids;
  limits.sample_vocab = tokenizer.vocab_size();
  TextStream stream(tokenizer);
  generate_tokens(model, cache, sampler, prompt, limits, [&](std::span<const int32_t> tokens) {
    const std::string text = stream.next(tokens);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return stream.text();
}

}  // namespace

int run_chat(const ChatSettings& settings, LlamaModel& model, const Tokenizer& tokenizer,
             const HfModelConfig& hf, std::istream& in) {
  const ChatTemplate chat_template =
      settings.chat_template.empty()
          ? default_chat_template(tokenizer, hf.source.value("model_type", std::string()))
          : parse_chat_template(settings.chat_template);
  std::vector<int32_t> stop_ids = chat_stop_tokens(chat_template, tokenizer);
  stop_ids.insert(stop_ids.end(), hf.eos_token_ids.begin(), hf.eos_token_ids.end());
  KvCache cache(model.config(), model.backend(), 1, settings.context);
  Sampler sampler(settings.sampling);
  std::vector<ChatMessage> history;
  if (!settings.system.empty()) history.push_back({"system", settings.system});
  const bool terminal = isatty(STDIN_FILENO) != 0;
  fmt::print(stderr, "[generate] chat with the {} template; end the input (Ctrl-D) to quit\n",
             chat_template_name(chat_template));
  int replies = 0;
  std::string line;
  while (true) {
    if (terminal) {
      fmt::print(stderr, "> ");
      std::fflush(stderr);
    }
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    history.push_back({"user", line});
    const RenderedChat rendered = render_chat(chat_template, tokenizer, history, true);
    ANVIL_CHECK(static_cast<int>(rendered.tokens.size()) < settings.context,
                "[generate] the conversation has grown to {} tokens, past the {}-token context; "
                "start a new session",
                rendered.tokens.size(), settings.context);
    history.push_back({"assistant", reply(model, cache, sampler, tokenizer, rendered.tokens,
                                          stop_ids, settings.max_new_tokens)});
    ++replies;
  }
  return replies;
}

}  // namespace anvil::cli
