// Text generation with a KV cache: the one decoding loop behind `anvil generate`, its chat mode
// and anything else that samples from a model. The prompt is prefilled in one call, then each
// new token costs one single-position step; no earlier position is recomputed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/llama.h"
#include "model/sampling.h"
#include "tokenizer/tokenizer.h"

namespace anvil {

struct GenerationLimits {
  int max_new_tokens = 200;
  std::vector<int32_t> stop_ids;  // generation ends before any of these (not emitted)
  int sample_vocab = 0;           // sample among ids [0, sample_vocab); 0: the model's vocab
};

// Resets `cache`, prefills `prompt` and samples until max_new_tokens, a stop id or a full cache.
// Calls on_token (if set) with every token generated so far after each new one; returns them.
std::vector<int32_t> generate_tokens(
    LlamaModel& model, KvCache& cache, Sampler& sampler, std::span<const int32_t> prompt,
    const GenerationLimits& limits,
    const std::function<void(std::span<const int32_t>)>& on_token = nullptr);

// Streams generated text: byte-level tokens may split a UTF-8 character, so each call decodes
// the whole sequence and returns only the bytes not returned before (a terminal joins them).
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  // Returns the new text of `generated` (all tokens so far).
  std::string next(std::span<const int32_t> generated);
  // Returns the text decoded so far.
  const std::string& text() const { return text_; }

 private:
  const Tokenizer* tokenizer_;
  std::string text_;
};

}  // namespace anvil
