// Token sampling from a row of logits on the host: greedy, temperature, top-k and top-p
// (nucleus), applied in that order as in Hugging Face generate(). Randomness comes from
// random.h's counter-based generator: draw i of a Sampler uses counter i of its seed, so a
// run is reproducible and a sampler can resume from draws().
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace anvil {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // keep the k most likely tokens; 0 = all
  float top_p = 1.0f;        // keep the smallest prefix with probability mass >= top_p
  uint64_t seed = 0;

  // Throws anvil::Error ("[sampling] ...") for a negative temperature or top_k, or a top_p
  // outside (0, 1].
  void validate() const;
};

// Returns the index of the largest logit (the lowest index among equal maxima).
int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params, uint64_t draws = 0);

  // Picks a token id from logits (V) according to the parameters.
  int32_t sample(std::span<const float> logits);
  // Returns the number of random draws made so far (the state to save for resumption).
  uint64_t draws() const { return draws_; }

 private:
  SamplingParams params_;
  uint64_t draws_ = 0;
  std::vector<int32_t> order_;  // candidate ids, most likely first (kept to avoid allocation)
  std::vector<double> probs_;
};

}  // namespace anvil
