// Task evaluation (see task_eval.h).
#include "eval/task_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>

#include "core/error.h"
#include "eval/loglikelihood.h"

namespace anvil {
namespace {

// The harness's _encode_pair for a causal model.
LoglikelihoodRequest encode_pair(const Tokenizer& tokenizer, const std::string& context_text,
                                 const std::string& continuation_text) {
  const std::string context = python_rstrip(context_text);
  const std::string continuation = context_text.substr(context.size()) + continuation_text;
  ANVIL_CHECK(!context.empty(), "[eval] a request has an empty context");
  LoglikelihoodRequest request;
  request.context = tokenizer.encode(context, true);
  std::vector<int32_t> whole = tokenizer.encode(context + continuation, true);
  ANVIL_CHECK(whole.size() > request.context.size(),
              "[eval] the continuation '{}' adds no token after its context", continuation);
  request.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(request.context.size()),
                              whole.end());
  return request;
}

// Index of the first maximum of values[i] / divisors[i].
int first_argmax(const std::vector<double>& values, const std::vector<double>& divisors) {
  int best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] / divisors[i] > values[best] / divisors[best]) best = static_cast<int>(i);
  }
  return best;
}

ScoreGroup mean_group(const std::string& name, int64_t items, double acc_sum, double norm_sum) {
  return ScoreGroup{name, items, items > 0 ? acc_sum / items : 0.0,
                    items > 0 ? norm_sum / items : 0.0};
}

}  // namespace

TaskScores evaluate_task(LlamaModel& model, const Tokenizer& tokenizer, const TaskInfo& task,
                         int shots, const std::vector<TaskDoc>& docs,
                         const TaskEvalOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  TaskScores scores;
  scores.task = task.name;
  scores.shots = shots;
  scores.has_acc_norm = task.has_acc_norm;
  scores.docs.resize(docs.size());
  // Requests in doc order; tokenizing is independent per doc, so it runs in parallel.
  std::vector<size_t> first_request(docs.size() + 1, 0);
  for (size_t d = 0; d < docs.size(); ++d) first_request[d + 1] = first_request[d] + docs[d].pairs.size();
  std::vector<LoglikelihoodRequest> requests(first_request.back());
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t d = 0; d < static_cast<int64_t>(docs.size()); ++d) {
    const TaskDoc& doc = docs[static_cast<size_t>(d)];
    for (size_t c = 0; c < doc.pairs.size(); ++c) {
      requests[first_request[static_cast<size_t>(d)] + c] =
          encode_pair(tokenizer, doc.pairs[c].first, doc.pairs[c].second);
    }
  }

  ScorerOptions scorer_options;
  scorer_options.window = options.window;
  scorer_options.max_rows = options.max_rows;
  LoglikelihoodScorer scorer(model, scorer_options);
  std::vector<LoglikelihoodResult> results(requests.size());
  // Each subtask is one scoring call, so its few-shot prefix is computed once.
  for (size_t begin = 0; begin < docs.size();) {
    size_t end = begin;
    while (end < docs.size() && docs[end].subtask == docs[begin].subtask) ++end;
    const size_t r0 = first_request[begin], r1 = first_request[end];
    const std::vector<LoglikelihoodResult> part = scorer.score(
        std::span<const LoglikelihoodRequest>(requests).subspan(r0, r1 - r0),
        [&](int64_t done) {
          if (!options.on_progress) return;
          // Requests complete in length order, not doc order; report the equivalent docs.
          const double share = static_cast<double>(done) / static_cast<double>(r1 - r0);
          options.on_progress(static_cast<int64_t>(begin) +
                                  static_cast<int64_t>(share * static_cast<double>(end - begin)),
                              static_cast<int64_t>(docs.size()));
        });
    std::copy(part.begin(), part.end(), results.begin() + static_cast<std::ptrdiff_t>(r0));
    begin = end;
  }
  for (const LoglikelihoodRequest& r : requests) {
    const int64_t whole = static_cast<int64_t>(r.context.size() + r.continuation.size()) - 1;
    scores.tokens_requested += std::min<int64_t>(whole, scorer.window());
  }
  scores.tokens_computed = scorer.tokens_computed();

  // Per doc, then per subtask (and MMLU category), then overall.
  std::map<std::string, std::array<double, 3>> categories;  // items, acc, acc_norm sums
  double acc_sum = 0, norm_sum = 0, subtask_acc_sum = 0;
  for (size_t begin = 0; begin < docs.size();) {
    double sub_acc = 0, sub_norm = 0;
    size_t end = begin;
    for (; end < docs.size() && docs[end].subtask == docs[begin].subtask; ++end) {
      const TaskDoc& doc = docs[end];
      DocScore& s = scores.docs[end];
      std::vector<double> lengths;
      for (size_t c = 0; c < doc.pairs.size(); ++c) {
        const LoglikelihoodResult& r = results[first_request[end] + c];
        s.loglikelihoods.push_back(r.logprob);
        s.greedy.push_back(r.greedy);
        lengths.push_back(static_cast<double>(python_length(doc.choices[c])));
      }
      s.acc = first_argmax(s.loglikelihoods, std::vector<double>(lengths.size(), 1.0)) == doc.gold;
      s.acc_norm = task.has_acc_norm && first_argmax(s.loglikelihoods, lengths) == doc.gold;
      sub_acc += s.acc;
      sub_norm += s.acc_norm;
    }
    const std::string& name = docs[begin].subtask;
    scores.subtasks.push_back(mean_group(name, static_cast<int64_t>(end - begin), sub_acc, sub_norm));
    if (task.name == "mmlu") {
      std::array<double, 3>& category = categories[mmlu_category(name.substr(5))];
      category[0] += static_cast<double>(end - begin);
      category[1] += sub_acc;
      category[2] += sub_norm;
    }
    acc_sum += sub_acc;
    norm_sum += sub_norm;
    subtask_acc_sum += scores.subtasks.back().acc;
    begin = end;
  }
  for (const auto& [name, sums] : categories) {
    scores.categories.push_back(
        mean_group(name, static_cast<int64_t>(sums[0]), sums[1], sums[2]));
  }
  scores.overall = mean_group(task.name, static_cast<int64_t>(docs.size()), acc_sum, norm_sum);
  scores.acc_macro = scores.subtasks.empty() ? 0.0 : subtask_acc_sum / scores.subtasks.size();
  scores.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return scores;
}

nlohmann::json task_scores_json(const TaskScores& scores) {
  const auto group_json = [&](const ScoreGroup& g) {
    nlohmann::json j = {{"items", g.items}, {"acc", g.acc}};
    if (scores.has_acc_norm) j["acc_norm"] = g.acc_norm;
    return j;
  };
  nlohmann::json out = group_json(scores.overall);
  out["task"] = scores.task;
  out["shots"] = scores.shots;
  out["acc_macro"] = scores.acc_macro;
  out["seconds"] = scores.seconds;
  out["items_per_s"] = scores.seconds > 0 ? scores.overall.items / scores.seconds : 0.0;
  out["tokens_computed"] = scores.tokens_computed;
  out["tokens_requested"] = scores.tokens_requested;
  for (const ScoreGroup& g : scores.subtasks) out["subtasks"][g.name] = group_json(g);
  for (const ScoreGroup& g : scores.categories) out["categories"][g.name] = group_json(g);
  return out;
}

nlohmann::json doc_score_json(const TaskDoc& doc, const DocScore& score, bool has_acc_norm) {
  nlohmann::json j = {{"task", doc.subtask},        {"doc", doc.index},
                      {"gold", doc.gold},           {"loglikelihoods", score.loglikelihoods},
                      {"greedy", score.greedy},     {"acc", score.acc ? 1 : 0}};
  if (has_acc_norm) j["acc_norm"] = score.acc_norm ? 1 : 0;
  return j;
}

std::string task_scores_table(const TaskScores& scores) {
  std::string out = scores.has_acc_norm ? "| task | items | acc | acc_norm |\n|---|---:|---:|---:|\n"
                                        : "| task | items | acc |\n|---|---:|---:|\n";
  const auto row = [&](const std::string& name, int64_t items, double acc, double norm) {
    out += fmt::format("| {} | {} | {:.4f} |", name, items, acc);
    out += scores.has_acc_norm ? fmt::format(" {:.4f} |\n", norm) : "\n";
  };
  if (scores.subtasks.size() > 1) {
    for (const ScoreGroup& g : scores.subtasks) row(g.name, g.items, g.acc, g.acc_norm);
    for (const ScoreGroup& g : scores.categories) {
      row("category " + g.name, g.items, g.acc, g.acc_norm);
    }
    row(fmt::format("{} (macro, {} subtasks)", scores.task, scores.subtasks.size()),
        scores.overall.items, scores.acc_macro, 0.0);
  }
  row(fmt::format("**{}** ({}-shot, micro)", scores.task, scores.shots), scores.overall.items,
      scores.overall.acc, scores.overall.acc_norm);
  return out;
}

}  // namespace anvil
