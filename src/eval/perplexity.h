// Perplexity of a token stream, defined so it compares with other tools:
//   - the stream is one sequence (a text tokenized whole, BOS included when the tokenizer's
//     post-processor adds one; or a shard split's tokens in order);
//   - windows follow the loop of transformers' "Perplexity of fixed-length models" guide:
//     begin = 0, stride, 2*stride, ...; end = min(begin + seq_len, N); stop after the window
//     that reaches N. A window scores only the tokens in [prev_end, end) (prev_end = the
//     previous window's end), and never its own first token, which has no context;
//   - stride = seq_len (the default) therefore gives non-overlapping windows that each predict
//     their own tokens 2..n, the last shorter window included;
//   - loss = sum of the scored tokens' negative log-likelihoods / their count (natural log),
//     perplexity = exp(loss).
// The guide itself multiplies each window's mean loss by (scored - 1) when it sums; anvil
// weights by the true count, so with stride < seq_len its number differs from the guide's
// printout by that weighting only (docs/interop.md). Each window's mean equals HF's outputs.loss.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "data/shard_set.h"
#include "model/llama.h"

namespace anvil {

// One forward pass: tokens [begin, end) of the stream, scoring the tokens in [score_from, end).
struct PerplexityWindow {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t score_from = 0;  // > begin: the window's first token is context only

  int64_t length() const { return end - begin; }
  int64_t scored() const { return end - score_from; }
};

struct PerplexityOptions {
  int seq_len = 0;     // window length in tokens (>= 2; windows must fit the model's context)
  int stride = 0;      // distance between window starts; 0 means seq_len
  int batch_size = 1;  // windows per forward pass (at most the model's max_batch)
  // Called after each forward pass with its windows and their summed loss.
  std::function<void(std::span<const PerplexityWindow>, const LossSum&)> on_batch;
};

struct PerplexityResult {
  double loss = 0.0;           // mean negative log-likelihood per scored token (nats)
  double perplexity = 0.0;     // exp(loss)
  int64_t scored_tokens = 0;   // tokens whose likelihood was counted
  int64_t input_tokens = 0;    // tokens in the stream
  int64_t windows = 0;         // forward windows evaluated
};

// Returns the windows of a stream of n_tokens tokens (see the header comment); throws for
// fewer than 2 tokens, seq_len < 2, or a stride outside [1, seq_len].
std::vector<PerplexityWindow> plan_perplexity_windows(int64_t n_tokens, int seq_len, int stride);

// Reads `count` tokens starting at `begin` of a stream into `out`.
using TokenReader = std::function<void(int64_t begin, int64_t count, int32_t* out)>;

// Evaluates a stream of n_tokens tokens read through `read`; token ids must lie in the model's
// vocabulary. The model's activations must hold batch_size rows of the longest window.
PerplexityResult evaluate_perplexity(LlamaModel& model, int64_t n_tokens, const TokenReader& read,
                                     const PerplexityOptions& options);
// Evaluates a token stream held in memory.
PerplexityResult evaluate_perplexity(LlamaModel& model, std::span<const int32_t> tokens,
                                     const PerplexityOptions& options);
// Evaluates one split of a prepared shard directory as a single stream.
PerplexityResult evaluate_perplexity(LlamaModel& model, const ShardSet& shards,
                                     const PerplexityOptions& options);

}  // namespace anvil
