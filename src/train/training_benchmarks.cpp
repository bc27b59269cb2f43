// Benchmarks during training (see training_benchmarks.h).
#include "train/training_benchmarks.h"

#include <fmt/format.h>

#include "eval/task_eval.h"
#include "train/run_artifacts.h"

namespace anvil {

TrainingBenchmarks::TrainingBenchmarks(const TrainConfig& config, bool warn) {
  const EvalConfigSection& eval = config.eval;
  if (eval.tasks.empty()) return;
  tokenizer_ = Tokenizer::load(run_tokenizer_path(config));
  for (size_t i = 0; i < eval.tasks.size(); ++i) {
    Task task;
    task.info = &find_task(eval.tasks[i]);
    task.shots = eval.task_shots >= 0 ? static_cast<int>(eval.task_shots) : task.info->default_shots;
    task.docs = load_task(TaskLoadOptions{.task = eval.tasks[i],
                                          .data = eval.task_data[i],
                                          .shots = static_cast<int>(eval.task_shots),
                                          .limit = eval.task_limit,
                                          .warn = warn});
    tasks_.push_back(std::move(task));
  }
}

std::string TrainingBenchmarks::describe() const {
  std::string out;
  for (const Task& task : tasks_) {
    out += fmt::format("{}{} ({} questions, {}-shot)", out.empty() ? "" : ", ", task.info->name,
                       task.docs.size(), task.shots);
  }
  return out;
}

std::vector<std::pair<std::string, double>> TrainingBenchmarks::score(DataParallelEngine& engine,
                                                                      int max_rows) {
  std::vector<std::pair<std::string, double>> out;
  for (const Task& task : tasks_) {
    TaskScores scores;
    engine.run_inference([&] {
      scores = evaluate_task(engine.model(), *tokenizer_, *task.info, task.shots, task.docs,
                             TaskEvalOptions{max_rows, 0, {}});
    });
    out.emplace_back(task.info->name + "_acc", scores.overall.acc);
    if (task.info->has_acc_norm) out.emplace_back(task.info->name + "_acc_norm", scores.overall.acc_norm);
  }
  return out;
}

}  // namespace anvil
