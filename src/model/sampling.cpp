// Sampling: temperature-scaled softmax restricted by top-k then top-p, drawn by inverse CDF
// over candidates sorted by (logit descending, id ascending) so ties resolve deterministically.
#include "model/sampling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/random.h"

namespace anvil {

namespace {
// Stream id of sampling draws (a fixed tag so they never collide with weight-init streams).
constexpr uint64_t kSamplingStream = 0x73616D706C696E67ull;  // "sampling"
}  // namespace

void SamplingParams::validate() const {
  ANVIL_CHECK(temperature >= 0.0f && std::isfinite(temperature),
              "[sampling] temperature must be >= 0, got {}", temperature);
  ANVIL_CHECK(top_k >= 0, "[sampling] top_k must be >= 0, got {}", top_k);
  ANVIL_CHECK(top_p > 0.0f && top_p <= 1.0f, "[sampling] top_p must be in (0, 1], got {}", top_p);
}

int32_t argmax(std::span<const float> logits) {
  ANVIL_CHECK(!logits.empty(), "[sampling] empty logits");
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params, uint64_t draws) : params_(params), draws_(draws) {
  params_.validate();
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.temperature == 0.0f) return argmax(logits);
  ANVIL_CHECK(!logits.empty(), "[sampling] empty logits");
  const size_t vocab = logits.size();
  order_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) order_[i] = static_cast<int32_t>(i);
  auto more_likely = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  size_t kept = vocab;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab) {
    kept = static_cast<size_t>(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<ptrdiff_t>(kept), order_.end(),
                      more_likely);
  } else if (params_.top_p < 1.0f) {
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  // Softmax of logits / temperature over the kept candidates, in double.
  probs_.resize(kept);
  const double inv_temperature = 1.0 / params_.temperature;
  double top = logits[static_cast<size_t>(order_[0])];
  for (size_t i = 1; i < kept; ++i)
    top = std::max<double>(top, logits[static_cast<size_t>(order_[i])]);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    probs_[i] = std::exp((logits[static_cast<size_t>(order_[i])] - top) * inv_temperature);
    total += probs_[i];
  }
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    size_t nucleus = 0;
    while (nucleus < kept) {
      mass += probs_[nucleus] / total;
      ++nucleus;
      if (mass >= params_.top_p) break;
    }
    kept = nucleus;
    total = 0.0;
    for (size_t i = 0; i < kept; ++i) total += probs_[i];
  }
  const double u = random_uniform(params_.seed, kSamplingStream, draws_++) * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += probs_[i];
    if (u < cumulative) return order_[i];
  }
  return order_[kept - 1];
}

}  // namespace anvil
