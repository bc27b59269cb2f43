// metrics.jsonl: one JSON object per line, per training step ({"type":"train",...}) and per
// evaluation ({"type":"eval",...}). Deterministic fields come first and are written with the
// shortest text that round-trips (fmt "{}"), so two runs that compute the same values write
// the same bytes; the wall-clock fields (tokens_per_s, elapsed_s) always come last, and a
// resume test compares lines after removing exactly those fields. On resume the file is cut
// back to the records of steps up to the checkpoint, so it reads as one uninterrupted run.
// A non-finite value (the loss of a skipped step) is written as null, and a line that cannot
// be written whole (disk full) is cut off again, so every line stays valid JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace anvil {

struct TrainStepRecord {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // counted target tokens trained on so far (all steps)
  double tokens_per_s = 0;
  double elapsed_s = 0;
  int64_t skipped_steps = 0;  // steps skipped so far for a non-finite loss or gradient norm
};

struct EvalRecord {
  int64_t step = 0;
  double loss = 0;
  double perplexity = 0;
  int64_t tokens = 0;  // target tokens this evaluation scored
  double elapsed_s = 0;
  bool has_loss = true;  // false when only benchmark tasks were scored (no validation split)
  // Benchmark scores ([eval] tasks) as metric name and value, e.g. ("mmlu_acc", 0.31).
  std::vector<std::pair<std::string, double>> task_scores;
};

// Returns the JSON line (no newline) for a record.
std::string format_metrics_line(const TrainStepRecord& record);
std::string format_metrics_line(const EvalRecord& record);

class MetricsWriter {
 public:
  // Opens `path` for appending after dropping every record whose step exceeds
  // `keep_through_step` (use -1 to start a fresh file). The cut is written atomically.
  MetricsWriter(std::filesystem::path path, int64_t keep_through_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends one line with one write(2) (a crash loses at most the current line); throws
  // naming the file and the system's reason when it cannot, with the file cut back to its
  // previous, valid length.
  void write(const TrainStepRecord& record);
  void write(const EvalRecord& record);

 private:
  void append_line(const std::string& line);
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes of whole lines in the file
};

}  // namespace anvil
