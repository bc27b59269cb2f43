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
#include "model/kv_cache.h"

namespace anvil::cli {
namespace {

// Returns the reply to the conversation of `prompt` (tokens ending in the assistant header),
// streamed to stdout as it is sampled.
std::string reply(LlamaModel& model, KvCache& cache, Sampler& sampler, const Tokenizer& tokenizer,
                  const std::vector<int32_t>& prompt, const std::vector<int32_t>& stop_ids,
                  int max_new_tokens) {
  Backend& backend = model.backend();
  const int vocab = model.config().vocab_size;
  Buffer logits_buffer(backend, static_cast<size_t>(vocab) * sizeof(float));
  const Tensor logits = logits_buffer.as(DType::f32, {1, vocab});
  std::vector<float> host_logits(static_cast<size_t>(vocab));
  const size_t sample_vocab = static_cast<size_t>(std::min(vocab, tokenizer.vocab_size()));
  cache.reset();
  std::vector<int32_t> step_tokens = prompt;
  std::vector<int32_t> generated;
  std::string printed;
  while (static_cast<int>(generated.size()) < max_new_tokens &&
         cache.length() + static_cast<int>(step_tokens.size()) <= cache.max_len()) {
    const int n = static_cast<int>(step_tokens.size());
    model.forward_step(Tensor(step_tokens.data(), DType::i32, {1, n}), cache, logits);
    backend.copy_to_host(host_logits.data(), logits);
    const int32_t next = sampler.sample(std::span<const float>(host_logits.data(), sample_vocab));
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    generated.push_back(next);
    step_tokens.assign(1, next);
    const std::string text = tokenizer.decode(generated);
    if (text.size() > printed.size()) {
      std::fwrite(text.data() + printed.size(), 1, text.size() - printed.size(), stdout);
      std::fflush(stdout);
    }
    printed = text;
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return printed;
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
