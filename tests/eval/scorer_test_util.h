// Models for the scoring tests: a small random Llama, and a "bigram" Llama whose every
// log-likelihood is known in closed form. The bigram model has zero attention and MLP weights,
// so each position's hidden state is its token's embedding; the embedding of token t is the
// one-hot vector of class t % dim, the final norm scales it by s = 1 / sqrt(1/dim + eps), and
// the head row v holds table[class][v], so the logits after token t are s * table[t % dim].
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "model/llama.h"

namespace anvil::test {

inline LlamaConfig scorer_config(int vocab, int dim, int max_seq_len) {
  LlamaConfig c;
  c.dim = dim;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 2 * dim;
  c.vocab_size = vocab;
  c.max_seq_len = max_seq_len;
  c.tie_embeddings = false;
  return c;
}

// A table of bigram logits: dim classes x vocab, uniform in [-3, 3).
inline std::vector<float> bigram_table(int dim, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> table(static_cast<size_t>(dim) * vocab);
  for (float& x : table) x = uniform(rng);
  return table;
}

inline std::unique_ptr<LlamaModel> make_bigram_model(Backend& backend, const LlamaConfig& config,
                                                     const std::vector<float>& table,
                                                     const ModelOptions& options) {
  auto model = std::make_unique<LlamaModel>(config, backend, options);
  const ParameterLayout& layout = model->full_layout();
  const int dim = config.dim, vocab = config.vocab_size;
  std::vector<float> embedding(static_cast<size_t>(vocab) * dim, 0.0f);
  for (int t = 0; t < vocab; ++t) embedding[static_cast<size_t>(t) * dim + t % dim] = 1.0f;
  model->set_parameter(layout.index_of("model.embed_tokens.weight"), embedding.data());
  std::vector<float> ones(static_cast<size_t>(dim), 1.0f);
  model->set_parameter(layout.index_of("model.norm.weight"), ones.data());
  std::vector<float> head(static_cast<size_t>(vocab) * dim);  // (V, C): head[v][c]
  for (int v = 0; v < vocab; ++v) {
    for (int c = 0; c < dim; ++c) head[static_cast<size_t>(v) * dim + c] = table[static_cast<size_t>(c) * vocab + v];
  }
  model->set_parameter(layout.index_of("lm_head.weight"), head.data());
  return model;
}

// The bigram model's log-probability of `next` after `previous`, and whether it is the argmax.
inline double bigram_logprob(const LlamaConfig& config, const std::vector<float>& table,
                             int32_t previous, int32_t next, bool* greedy = nullptr) {
  const int vocab = config.vocab_size;
  const double scale = 1.0 / std::sqrt(1.0 / config.dim + static_cast<double>(config.norm_eps));
  const float* row = table.data() + static_cast<size_t>(previous % config.dim) * vocab;
  double top = row[0];
  int argmax = 0;
  for (int v = 1; v < vocab; ++v) {
    if (row[v] > top) {
      top = row[v];
      argmax = v;
    }
  }
  double sum = 0.0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(scale * (row[v] - top));
  if (greedy) *greedy = argmax == next;
  return scale * (row[next] - top) - std::log(sum);
}

}  // namespace anvil::test
