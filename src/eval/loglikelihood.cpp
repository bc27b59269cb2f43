// Continuation scoring with a shared KV-cache prefix (see loglikelihood.h).
#include "eval/loglikelihood.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/buffer.h"
#include "core/error.h"

namespace anvil {

// One distinct input sequence and the requests that score positions of it.
struct LoglikelihoodScorer::Row {
  std::vector<int32_t> input;  // context + continuation, cut to the window, last token dropped
  std::vector<int> requests;
  int first_scored = 0;  // smallest position whose logits a request reads
  int length() const { return static_cast<int>(input.size()); }
  int logit_rows() const { return length() - first_scored; }
};

namespace {

// The statistics of one row of logits that every request reading it needs.
struct LogitRowStats {
  double log_normalizer = 0.0;  // log sum exp
  int32_t argmax = 0;
};

LogitRowStats row_stats(const float* logits, int vocab) {
  LogitRowStats stats;
  float top = logits[0];
  for (int v = 1; v < vocab; ++v) {
    if (logits[v] > top) {  // first maximum, as argmax
      top = logits[v];
      stats.argmax = v;
    }
  }
  double sum = 0.0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - top);
  stats.log_normalizer = static_cast<double>(top) + std::log(sum);
  return stats;
}

}  // namespace

LoglikelihoodScorer::LoglikelihoodScorer(LlamaModel& model, const ScorerOptions& options)
    : model_(&model),
      window_(options.window > 0 ? options.window : model.config().max_seq_len),
      max_rows_(std::max(1, std::min(options.max_rows, model.options().max_batch))),
      max_logit_rows_(std::max(1, options.max_logit_rows)),
      cache_(model.config(), model.backend(), max_rows_, window_) {
  ANVIL_CHECK(window_ >= 2 && window_ <= model.config().max_seq_len,
              "[eval] the scoring window ({}) must lie in 2..{} (the model's context)", window_,
              model.config().max_seq_len);
}

std::vector<LoglikelihoodResult> LoglikelihoodScorer::score(
    std::span<const LoglikelihoodRequest> requests, const std::function<void(int64_t)>& on_progress) {
  std::vector<LoglikelihoodResult> results(requests.size());
  if (requests.empty()) return results;
  const int vocab = model_->config().vocab_size;
  // Distinct inputs, each with the requests it serves.
  std::vector<Row> rows;
  std::map<std::vector<int32_t>, int> row_of_input;
  for (size_t r = 0; r < requests.size(); ++r) {
    const LoglikelihoodRequest& request = requests[r];
    const auto context = static_cast<int64_t>(request.context.size());
    const auto continuation = static_cast<int64_t>(request.continuation.size());
    ANVIL_CHECK(context >= 1 && continuation >= 1,
                "[eval] request {} has an empty context or continuation", r);
    ANVIL_CHECK(continuation <= window_,
                "[eval] a continuation of {} tokens does not fit the {}-token window",
                continuation, window_);
    for (const int32_t id : request.context) {
      ANVIL_CHECK(id >= 0 && id < vocab, "[eval] token id {} outside the model's vocabulary {}",
                  id, vocab);
    }
    for (const int32_t id : request.continuation) {
      ANVIL_CHECK(id >= 0 && id < vocab, "[eval] token id {} outside the model's vocabulary {}",
                  id, vocab);
    }
    const int64_t whole = context + continuation;
    const int64_t cut = std::max<int64_t>(0, whole - 1 - window_);  // tokens lost on the left
    std::vector<int32_t> input(request.context.begin(), request.context.end());
    input.insert(input.end(), request.continuation.begin(), request.continuation.end() - 1);
    input.erase(input.begin(), input.begin() + cut);
    const int first_scored = static_cast<int>(context - 1 - cut);
    const auto [found, added] = row_of_input.try_emplace(input, static_cast<int>(rows.size()));
    if (added) rows.push_back(Row{std::move(input), {}, first_scored});
    Row& row = rows[found->second];
    row.requests.push_back(static_cast<int>(r));
    row.first_scored = std::min(row.first_scored, first_scored);
  }
  // The prefix every row shares, up to the first position any request reads.
  int prefix = rows[0].first_scored;
  for (const Row& row : rows) {
    prefix = std::min(prefix, row.first_scored);
    const auto mismatch = std::mismatch(rows[0].input.begin(), rows[0].input.begin() + prefix,
                                        row.input.begin());
    prefix = static_cast<int>(mismatch.first - rows[0].input.begin());
  }
  cache_.reset();
  if (prefix > 0) {
    prefill(std::span<const int32_t>(rows[0].input).first(static_cast<size_t>(prefix)));
    cache_.share_prefix(model_->backend(),
                        std::min<int>(max_rows_, static_cast<int>(rows.size())));
  }
  // Longest remainder first, so a batch's rows are of similar length.
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.length() > b.length(); });

  int64_t done = 0;
  size_t begin = 0;
  while (begin < rows.size()) {
    size_t end = begin + 1;
    int logit_rows = rows[begin].logit_rows();
    while (end < rows.size() && static_cast<int>(end - begin) < max_rows_ &&
           logit_rows + rows[end].logit_rows() <= max_logit_rows_) {
      logit_rows += rows[end].logit_rows();
      ++end;
    }
    run_rows(std::span<Row>(rows).subspan(begin, end - begin), prefix, requests, results);
    for (size_t i = begin; i < end; ++i) done += static_cast<int64_t>(rows[i].requests.size());
    if (on_progress) on_progress(done);
    begin = end;
  }
  return results;
}

void LoglikelihoodScorer::prefill(std::span<const int32_t> input) {
  const int step = model_->options().max_seq;
  std::vector<int32_t> piece;
  for (size_t start = 0; start < input.size(); start += static_cast<size_t>(step)) {
    const size_t n = std::min(input.size() - start, static_cast<size_t>(step));
    piece.assign(input.begin() + static_cast<std::ptrdiff_t>(start),
                 input.begin() + static_cast<std::ptrdiff_t>(start + n));
    model_->forward_step(Tensor(piece.data(), DType::i32, {1, static_cast<int64_t>(n)}), cache_,
                         {}, Tensor());
    tokens_computed_ += static_cast<int64_t>(n);
  }
}

void LoglikelihoodScorer::run_rows(std::span<Row> rows, int prefix,
                                   std::span<const LoglikelihoodRequest> requests,
                                   std::vector<LoglikelihoodResult>& results) {
  Backend& backend = model_->backend();
  const int vocab = model_->config().vocab_size;
  const int batch = static_cast<int>(rows.size());
  const int remainder = rows[0].length() - prefix;  // the longest row comes first
  int logit_rows = 0;
  for (const Row& row : rows) logit_rows += row.logit_rows();
  Buffer logits_buffer(backend, static_cast<size_t>(logit_rows) * vocab * sizeof(float),
                       MemoryCategory::workspace);
  std::vector<float> host_logits(static_cast<size_t>(logit_rows) * vocab);
  // Each request sums its targets' logits as their segments arrive.
  for (const Row& row : rows) {
    for (const int r : row.requests) results[r] = LoglikelihoodResult{0.0, true};
  }
  cache_.truncate(prefix, batch);
  const int step = model_->options().max_seq;
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  std::vector<std::pair<int, int>> position_owner;  // (row, input position) per logit row
  std::vector<LogitRowStats> stats;
  for (int seg_start = 0; seg_start < remainder; seg_start += step) {
    const int seg_len = std::min(step, remainder - seg_start);
    const int first = prefix + seg_start;  // input position of the segment's column 0
    tokens.assign(static_cast<size_t>(batch) * seg_len, 0);
    positions.clear();
    position_owner.clear();
    for (int i = 0; i < batch; ++i) {
      const Row& row = rows[i];
      for (int t = 0; t < seg_len; ++t) {
        const int p = first + t;
        tokens[static_cast<size_t>(i) * seg_len + t] = row.input[std::min(p, row.length() - 1)];
        if (p >= row.first_scored && p < row.length()) {
          positions.push_back(int64_t{i} * seg_len + t);
          position_owner.emplace_back(i, p);
        }
      }
    }
    const auto selected = static_cast<int64_t>(positions.size());
    const Tensor logits =
        selected > 0 ? logits_buffer.as(DType::f32, {selected, vocab}) : Tensor();
    model_->forward_step(Tensor(tokens.data(), DType::i32, {batch, seg_len}), cache_, positions,
                         logits);
    tokens_computed_ += int64_t{batch} * seg_len;
    if (selected == 0) continue;
    backend.copy_to_host(host_logits.data(), logits);
    stats.resize(static_cast<size_t>(selected));
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t k = 0; k < selected; ++k) {
      stats[static_cast<size_t>(k)] =
          row_stats(host_logits.data() + static_cast<size_t>(k) * vocab, vocab);
    }
    for (int64_t k = 0; k < selected; ++k) {
      const auto [i, p] = position_owner[static_cast<size_t>(k)];
      const float* row_logits = host_logits.data() + static_cast<size_t>(k) * vocab;
      const LogitRowStats& s = stats[static_cast<size_t>(k)];
      for (const int r : rows[i].requests) {
        // The request's input is the row's: its continuation ends at the row's last position.
        const LoglikelihoodRequest& request = requests[r];
        const int first_scored = rows[i].length() - static_cast<int>(request.continuation.size());
        if (p < first_scored) continue;
        const int32_t target = request.continuation[static_cast<size_t>(p - first_scored)];
        results[r].logprob += static_cast<double>(row_logits[target]) - s.log_normalizer;
        results[r].greedy = results[r].greedy && s.argmax == target;
      }
    }
  }
}

}  // namespace anvil
