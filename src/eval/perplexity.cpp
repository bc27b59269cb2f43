// Sliding-window perplexity (definition in perplexity.h). Windows of equal length are packed
// into batches of up to batch_size rows; positions that are context only get the ignore
// target, so the model's loss sum and count are exactly the scored tokens'.
#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace anvil {
namespace {

// Returns the longest context the model's activations were sized for.
int model_context(const LlamaModel& model) {
  return model.options().max_seq > 0 ? model.options().max_seq : model.config().max_seq_len;
}

// Fills one batch row: tokens of the window, and targets = next token where it is scored.
void fill_row(const PerplexityWindow& window, const std::vector<int32_t>& stream_part,
              int32_t* tokens, int32_t* targets) {
  const int64_t length = window.length();
  for (int64_t t = 0; t < length; ++t) {
    tokens[t] = stream_part[static_cast<size_t>(t)];
    const int64_t predicted = window.begin + t + 1;  // stream position the row predicts
    const bool scored = t + 1 < length && predicted >= window.score_from;
    targets[t] = scored ? stream_part[static_cast<size_t>(t + 1)] : kIgnoreIndex;
  }
}

}  // namespace

std::vector<PerplexityWindow> plan_perplexity_windows(int64_t n_tokens, int seq_len, int stride) {
  ANVIL_CHECK(n_tokens >= 2, "[eval] perplexity needs at least 2 tokens, got {}", n_tokens);
  ANVIL_CHECK(seq_len >= 2, "[eval] --seq-len must be at least 2, got {}", seq_len);
  if (stride == 0) stride = seq_len;
  ANVIL_CHECK(stride >= 1 && stride <= seq_len,
              "[eval] --stride must be between 1 and --seq-len ({}), got {}", seq_len, stride);
  std::vector<PerplexityWindow> windows;
  int64_t prev_end = 0;
  for (int64_t begin = 0; begin < n_tokens; begin += stride) {
    const int64_t end = std::min<int64_t>(begin + seq_len, n_tokens);
    const int64_t score_from = std::max(prev_end, begin + 1);
    if (end > score_from) windows.push_back({begin, end, score_from});
    prev_end = end;
    if (end == n_tokens) break;
  }
  return windows;
}

PerplexityResult evaluate_perplexity(LlamaModel& model, int64_t n_tokens, const TokenReader& read,
                                     const PerplexityOptions& options) {
  const std::vector<PerplexityWindow> windows =
      plan_perplexity_windows(n_tokens, options.seq_len, options.stride);
  int64_t longest = 0;
  for (const PerplexityWindow& window : windows) longest = std::max(longest, window.length());
  ANVIL_CHECK(longest <= model_context(model),
              "[eval] windows of {} tokens exceed the model's context of {} tokens", longest,
              model_context(model));
  ANVIL_CHECK(options.batch_size >= 1 && options.batch_size <= model.options().max_batch,
              "[eval] batch size {} must be between 1 and the model's max_batch {}",
              options.batch_size, model.options().max_batch);
  const int32_t vocab = model.config().vocab_size;
  const size_t max_rows = static_cast<size_t>(options.batch_size);
  std::vector<int32_t> tokens(max_rows * static_cast<size_t>(longest)), targets(tokens.size());
  std::vector<int32_t> part;

  PerplexityResult result;
  result.input_tokens = n_tokens;
  LossSum total;
  for (size_t first = 0; first < windows.size();) {
    // A batch holds consecutive windows of one length.
    const int64_t length = windows[first].length();
    size_t last = first + 1;
    while (last < windows.size() && last - first < max_rows && windows[last].length() == length) {
      ++last;
    }
    const int rows = static_cast<int>(last - first);
    for (int r = 0; r < rows; ++r) {
      const PerplexityWindow& window = windows[first + r];
      part.resize(static_cast<size_t>(length));
      read(window.begin, length, part.data());
      for (int64_t t = 0; t < length; ++t) {
        ANVIL_CHECK(part[t] >= 0 && part[t] < vocab,
                    "[eval] token id {} at position {} is outside the model's vocabulary of {}",
                    part[t], window.begin + t, vocab);
      }
      fill_row(window, part, tokens.data() + r * length, targets.data() + r * length);
    }
    Batch batch;
    batch.tokens = Tensor(tokens.data(), DType::i32, Shape{rows, length});
    batch.targets = Tensor(targets.data(), DType::i32, Shape{rows, length});
    const LossSum loss = model.forward_loss(batch);
    int64_t expected = 0;
    for (size_t w = first; w < last; ++w) expected += windows[w].scored();
    ANVIL_CHECK(loss.count == expected, "[eval] the model counted {} tokens, expected {}",
                loss.count, expected);
    total += loss;
    if (options.on_batch) {
      options.on_batch(std::span<const PerplexityWindow>(windows.data() + first, rows), loss);
    }
    first = last;
  }
  result.windows = static_cast<int64_t>(windows.size());
  result.scored_tokens = total.count;
  result.loss = total.mean();
  result.perplexity = std::exp(result.loss);
  return result;
}

PerplexityResult evaluate_perplexity(LlamaModel& model, std::span<const int32_t> tokens,
                                     const PerplexityOptions& options) {
  const TokenReader read = [tokens](int64_t begin, int64_t count, int32_t* out) {
    std::copy_n(tokens.begin() + begin, count, out);
  };
  return evaluate_perplexity(model, static_cast<int64_t>(tokens.size()), read, options);
}

PerplexityResult evaluate_perplexity(LlamaModel& model, const ShardSet& shards,
                                     const PerplexityOptions& options) {
  const TokenReader read = [&shards](int64_t begin, int64_t count, int32_t* out) {
    shards.read_tokens(static_cast<uint64_t>(begin), static_cast<uint64_t>(count), out);
  };
  return evaluate_perplexity(model, static_cast<int64_t>(shards.token_count()), read, options);
}

}  // namespace anvil
