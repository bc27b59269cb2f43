// Multiple-choice benchmark tasks, built exactly as lm-evaluation-harness (0.4) builds its
// default tasks, so anvil's accuracies compare with published ones:
//   mmlu            test split, k-shot from the subject's dev split (first k, default 5); the
//                   subject header, "Question\nA. ..\nD. ..\nAnswer:", choices " A".." D"; acc.
//                   Subjects outside MMLU's 57 get the same header (underscores as spaces),
//                   the category "custom" and one warning naming them.
//   hellaswag       validation; the harness's preprocessing of context and endings; acc,
//                   acc_norm (log-likelihood per character of the ending).
//   arc_easy,       "Question: ..\nAnswer:", the answer texts; acc, acc_norm.
//   arc_challenge
//   piqa            "Question: {goal}\nAnswer:", the two solutions; acc, acc_norm.
//   winogrande      the sentence up to the blank filled with each option, scoring the rest of
//                   the sentence (partial scoring); acc.
//   boolq           "{passage}\nQuestion: {question}?\nAnswer:", " no"/" yes"; acc.
// Only mmlu takes few-shot examples (the others are 0-shot, as the harness runs them by default).
// docs/eval.md lists the input files and fields of each task.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "data/line_reader.h"

namespace anvil {

struct TaskInfo {
  std::string name;
  std::string split;        // the split the harness evaluates
  int default_shots = 0;
  bool has_acc_norm = false;
  std::string data_layout;  // what --data points at
};

// Returns every task anvil knows, in a fixed order.
const std::vector<TaskInfo>& known_tasks();
// Returns the task called `name`; throws naming the known tasks (with a suggestion) otherwise.
const TaskInfo& find_task(const std::string& name);

// One question as the harness scores it: one (context, continuation) pair per choice.
struct TaskDoc {
  std::string subtask;  // the harness's task name: "mmlu_anatomy", "hellaswag", ...
  int64_t index = 0;    // position in the subtask's split
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> choices;  // the choice strings whose length acc_norm divides by
  int gold = 0;
};

struct TaskLoadOptions {
  std::string task;
  std::filesystem::path data;
  int shots = -1;     // -1: the task's default
  int64_t limit = 0;  // > 0: the first `limit` docs of each subtask (the harness's --limit)
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;  // bound on one task file line
  // false: print no warnings (every rank of a job reads the tasks; rank 0 alone speaks).
  bool warn = true;
};

// Reads the task's data and builds every doc's pairs. Bad data (a missing file, field or
// column, an answer out of range, fewer dev questions than shots) throws one line naming the
// file and line.
std::vector<TaskDoc> load_task(const TaskLoadOptions& options);

// The category of MMLU-layout subjects that are not among MMLU's 57 (private exams,
// translated or CMMLU-style sets): scored with the same prompt, reported as a group of their own.
inline constexpr const char* kMmluCustomCategory = "custom";

// Returns the MMLU category of a subject: "stem", "humanities", "social_sciences", "other", or
// kMmluCustomCategory for a subject not among MMLU's 57.
std::string mmlu_category(const std::string& subject);

// Python's str.strip() and str.rstrip() for UTF-8 text (the Unicode whitespace set).
std::string python_strip(const std::string& text);
std::string python_rstrip(const std::string& text);
// Returns the number of code points of UTF-8 text (Python's len of a str).
int64_t python_length(const std::string& text);

}  // namespace anvil
