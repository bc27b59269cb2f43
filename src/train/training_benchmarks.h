// Benchmarks scored during training ([eval] tasks, eval/tasks.h): the task files are read and
// their prompts built once when the run starts, then every evaluation scores them with the
// training model through the KV-cache scorer, the same code `anvil eval --task` runs. Every rank
// scores every question (the model's forward passes are collective under ZeRO-3).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "eval/tasks.h"
#include "parallel/engine.h"
#include "tokenizer/tokenizer.h"
#include "train/config.h"

namespace anvil {

class TrainingBenchmarks {
 public:
  // Reads the tasks of config.eval (none: empty()). Bad task files throw before training.
  // `warn`: print the readers' warnings (world rank 0 of a job; the other ranks read quietly).
  TrainingBenchmarks(const TrainConfig& config, bool warn);

  bool empty() const { return tasks_.empty(); }
  // Returns a line for the start-of-run log.
  std::string describe() const;
  // Scores every task; returns (metric, value) pairs: "<task>_acc" and, where the task defines
  // it, "<task>_acc_norm".
  std::vector<std::pair<std::string, double>> score(DataParallelEngine& engine, int max_rows);

 private:
  struct Task {
    const TaskInfo* info = nullptr;
    int shots = 0;
    std::vector<TaskDoc> docs;
  };
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<Task> tasks_;
};

}  // namespace anvil
