// Log-likelihood scoring of continuations, as lm-evaluation-harness's loglikelihood requests:
// the summed log-probability of the continuation's tokens given the context, and whether each
// of them is the greedy (argmax) choice. Inputs longer than the context window are cut from the
// left exactly as the harness cuts them: (context + continuation)[-(window + 1):][:-1].
//
// Speed comes from three things the results do not depend on:
//   - requests whose inputs are equal are computed once (a multiple-choice question whose
//     choices are single tokens, as MMLU's " A".." D", is one sequence);
//   - the longest prefix common to every input of a call (a subject's few-shot examples) is
//     prefilled into the KV cache once and copied to each batch row;
//   - the remaining parts are batched, longest first, right-padded (padding sits after every
//     scored position, so causal attention never lets it change them).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/llama.h"

namespace anvil {

struct LoglikelihoodRequest {
  std::vector<int32_t> context;       // at least one token
  std::vector<int32_t> continuation;  // at least one token, at most the window
};

struct LoglikelihoodResult {
  double logprob = 0.0;  // natural log
  bool greedy = false;   // every continuation token is the argmax of its logits
};

struct ScorerOptions {
  int window = 0;    // longest input in tokens (the model's context); 0: config().max_seq_len
  int max_rows = 8;  // sequences per forward call (capped by the model's max_batch)
  // Logit rows kept per forward call (each is vocab floats); rows of one sequence never split.
  int max_logit_rows = 512;
};

class LoglikelihoodScorer {
 public:
  // The model's max_seq bounds the tokens of one forward call, its max_batch the rows.
  LoglikelihoodScorer(LlamaModel& model, const ScorerOptions& options);

  // Scores `requests` in order. on_progress (if set) gets the requests done so far.
  std::vector<LoglikelihoodResult> score(std::span<const LoglikelihoodRequest> requests,
                                         const std::function<void(int64_t)>& on_progress = {});

  // Returns the positions run through the model so far (prefixes once, padding included).
  int64_t tokens_computed() const { return tokens_computed_; }
  int window() const { return window_; }

 private:
  struct Row;
  // Prefills tokens [0, length) of `input` into the cache (batch 1), in calls of max_seq.
  void prefill(std::span<const int32_t> input);
  // Runs `rows` (one batch) after the shared prefix, filling their requests' results.
  void run_rows(std::span<Row> rows, int prefix, std::span<const LoglikelihoodRequest> requests,
                std::vector<LoglikelihoodResult>& results);

  LlamaModel* model_;
  int window_;
  int max_rows_;
  int max_logit_rows_;
  KvCache cache_;
  int64_t tokens_computed_ = 0;
};

}  // namespace anvil
