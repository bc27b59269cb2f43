// The decoding loop (see generation.h).
#include "eval/generation.h"

#include <algorithm>

#include "core/buffer.h"
#include "core/error.h"

namespace anvil {

std::vector<int32_t> generate_tokens(
    LlamaModel& model, KvCache& cache, Sampler& sampler, std::span<const int32_t> prompt,
    const GenerationLimits& limits, const std::function<void(std::span<const int32_t>)>& on_token) {
  ANVIL_CHECK(!prompt.empty(), "[generate] the prompt is empty");
  Backend& backend = model.backend();
  const int vocab = model.config().vocab_size;
  const int sample_vocab = limits.sample_vocab > 0 ? std::min(limits.sample_vocab, vocab) : vocab;
  Buffer logits_buffer(backend, static_cast<size_t>(vocab) * sizeof(float),
                       MemoryCategory::workspace);
  const Tensor logits = logits_buffer.as(DType::f32, {1, vocab});
  std::vector<float> host_logits(static_cast<size_t>(vocab));
  cache.reset();
  std::vector<int32_t> step_tokens(prompt.begin(), prompt.end());
  std::vector<int32_t> generated;
  while (static_cast<int>(generated.size()) < limits.max_new_tokens &&
         cache.length() + static_cast<int>(step_tokens.size()) <= cache.max_len()) {
    const int n = static_cast<int>(step_tokens.size());
    model.forward_step(Tensor(step_tokens.data(), DType::i32, {1, n}), cache, logits);
    backend.copy_to_host(host_logits.data(), logits);
    const int32_t next = sampler.sample(
        std::span<const float>(host_logits.data(), static_cast<size_t>(sample_vocab)));
    if (std::find(limits.stop_ids.begin(), limits.stop_ids.end(), next) !=
        limits.stop_ids.end()) {
      break;
    }
    generated.push_back(next);
    step_tokens.assign(1, next);
    if (on_token) on_token(generated);
  }
  return generated;
}

std::string TextStream::next(std::span<const int32_t> generated) {
  std::string text = tokenizer_->decode(generated);
  std::string added = text.size() > text_.size() ? text.substr(text_.size()) : std::string();
  text_ = std::move(text);
  return added;
}

}  // namespace anvil
