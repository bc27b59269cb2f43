// Runs a multiple-choice task on a model and aggregates its scores as lm-evaluation-harness
// does: per doc acc (argmax of the choices' log-likelihoods, the first on ties) and, where
// the task defines it, acc_norm (argmax of log-likelihood per character of the choice); per
// subtask the mean; for MMLU also per category (subjects outside MMLU's 57 in the category
// "custom") and overall, micro (every question weighs the same, the harness's weight_by_size)
// and macro (the mean of the subjects).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/tasks.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace anvil {

struct DocScore {
  std::vector<double> loglikelihoods;  // one per choice
  std::vector<bool> greedy;
  bool acc = false;
  bool acc_norm = false;
};

struct ScoreGroup {
  std::string name;
  int64_t items = 0;
  double acc = 0.0;
  double acc_norm = 0.0;
};

struct TaskScores {
  std::string task;
  int shots = 0;
  bool has_acc_norm = false;
  std::vector<DocScore> docs;         // in the order of the task's docs
  std::vector<ScoreGroup> subtasks;   // mmlu: one per subject
  std::vector<ScoreGroup> categories; // mmlu only
  ScoreGroup overall;                 // micro average over every doc
  double acc_macro = 0.0;             // mean of the subtasks' acc
  double seconds = 0.0;
  int64_t tokens_computed = 0;  // positions run through the model (shared prefixes once)
  int64_t tokens_requested = 0; // positions of every request's input counted separately
};

struct TaskEvalOptions {
  int max_rows = 8;  // sequences per forward call
  int window = 0;    // 0: the model's context
  // Called as docs complete: (docs done, docs in all).
  std::function<void(int64_t, int64_t)> on_progress;
};

// Tokenizes each doc's pairs as the harness's _encode_pair does (trailing context whitespace
// moves to the continuation; context + continuation is encoded whole, with the tokenizer's
// special tokens, and split after the context's tokens) and scores them.
TaskScores evaluate_task(LlamaModel& model, const Tokenizer& tokenizer, const TaskInfo& task,
                         int shots, const std::vector<TaskDoc>& docs,
                         const TaskEvalOptions& options);

// Returns the summary (no per-doc entries) as one JSON object.
nlohmann::json task_scores_json(const TaskScores& scores);
// Returns one doc's line for --items (the doc's subtask, index, gold and scores).
nlohmann::json doc_score_json(const TaskDoc& doc, const DocScore& score, bool has_acc_norm);
// Returns the Markdown table of subtasks, categories and totals.
std::string task_scores_table(const TaskScores& scores);

}  // namespace anvil
