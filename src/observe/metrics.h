// metrics.jsonl: one JSON object per line, per training step ({"type":"train",...}) and per
// evaluation ({"type":"eval",...}). Deterministic fields come first and are written with the
// shortest text that round-trips (fmt "{}"), so two runs that compute the same values write
// the same bytes; then the memory (mem_bytes, mem_peak_bytes, mem_planned_bytes, mem_peak: what
// the process has allocated so far and the plan's peak for it, which a resumed process or
// another mesh legitimately changes)
// and last the wall-clock fields (tokens_per_s, mfu, elapsed_s); a resume test compares lines
// after removing exactly those memory and wall-clock fields. On resume the file is cut
// back to the records of steps up to the checkpoint, so it reads as one uninterrupted run.
// A non-finite value (the loss of a skipped step) is written as null, and a line that cannot
// be written whole (disk full) is cut off again, so every line stays valid JSON.
// metrics.jsonl is one MetricsSink; the trainer writes every record to a list of them
// (MetricsSinks), the TensorBoard event files (tensorboard_sink.h) being the other.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/memory_category.h"

namespace anvil {

class AppendFile;

struct TrainStepRecord {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // counted target tokens trained on so far (all steps)
  double tokens_per_s = 0;
  double elapsed_s = 0;
  int64_t skipped_steps = 0;  // steps skipped so far for a non-finite loss or gradient norm
  double mfu = -1;  // model FLOP utilisation of the step (0-1); < 0: unknown, not written
  double loss_scale = 0;  // the dynamic loss scale the step ran at; 0: no loss scaling
  // The times the host blocked on its device during the step and the bytes it read back (this
  // rank's; 0 on a host backend, whose ops finish before they return): a step that stalls the
  // host shows here ("host_waits", "readback_bytes").
  int64_t host_waits = 0;
  int64_t readback_bytes = 0;
  // A mixture's sources (data.sources paths) and the tokens of the windows each supplied so
  // far (seq_len per window), written as "source_tokens": {...}; empty for one dataset.
  std::vector<std::pair<std::string, int64_t>> source_tokens{};
  // Memory at the step's end, each the maximum over ranks, in bytes as the backends counted
  // them: the bytes held now, the most held at once since the run started, and each
  // category's own peak ("mem_peak": {"frozen_weights": ..., ...}). Not written when
  // mem_bytes < 0.
  int64_t mem_bytes = -1;
  int64_t mem_peak_bytes = 0;
  // The pre-flight's planned peak per device ("mem_planned_bytes", plan/preflight.h), to read
  // beside mem_peak_bytes; 0: no plan (preflight.mode = off), not written.
  int64_t mem_planned_bytes = 0;
  MemoryByCategory mem_peak{};
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
  // A mixture's validation loss per source path, written as "source_val_loss": {...}.
  std::vector<std::pair<std::string, double>> source_val_loss{};
};

// The number of data-parallel ranks changed at a resume: the checkpoint of `step` was written
// by `previous` of them and training goes on with `world` (an elastic launch shrinking or
// growing, or a resume by hand on another world size). A resume from `step` rewrites it, so
// the cut at `step` drops it.
struct WorldChangeRecord {
  int64_t step = 0;
  int world = 0;
  int previous = 0;
};

// Returns the JSON line (no newline) for a record.
std::string format_metrics_line(const WorldChangeRecord& record);
std::string format_metrics_line(const TrainStepRecord& record);
std::string format_metrics_line(const EvalRecord& record);

// One named number of a record, as TensorBoard and `anvil report` show it. A number `f` of
// a train (eval) record is "train/f" ("eval/f"); a number `k` inside an object field `g` is
// "g/k" (a field "memory": {"activations": ...} gives "memory/activations"); null
// (non-finite), boolean and string fields are left out, and so is "step", the x axis.
struct MetricScalar {
  std::string tag;
  double value = 0;
};

// Returns the scalars of one metrics.jsonl record, in the record's field order.
std::vector<MetricScalar> metric_scalars(const nlohmann::ordered_json& record);

// A destination for the trainer's records. Each sink opens cut back to the checkpoint step
// it resumes from, so no destination ever holds a step twice.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // Records one training step; throws naming the file when it cannot.
  virtual void write(const TrainStepRecord& record) = 0;
  // Records one evaluation; throws naming the file when it cannot.
  virtual void write(const EvalRecord& record) = 0;
  // Records a change of world size; a sink that charts per-step values ignores it.
  virtual void write(const WorldChangeRecord&) {}
};

// metrics.jsonl.
class MetricsWriter : public MetricsSink {
 public:
  // Opens `path` for appending after dropping every record whose step exceeds
  // `keep_through_step` and the world change at it (use -1 to start a fresh file). The cut is
  // written atomically.
  MetricsWriter(std::filesystem::path path, int64_t keep_through_step);
  ~MetricsWriter() override;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends one line with one write(2) (a crash loses at most the current line); throws
  // naming the file and the system's reason when it cannot, with the file cut back to its
  // previous, valid length.
  void write(const TrainStepRecord& record) override;
  void write(const EvalRecord& record) override;
  void write(const WorldChangeRecord& record) override;

 private:
  std::unique_ptr<AppendFile> file_;
};

// Every sink of a run, written in order (metrics.jsonl first, the file of record).
class MetricsSinks : public MetricsSink {
 public:
  // Adds a sink.
  void add(std::unique_ptr<MetricsSink> sink) { sinks_.push_back(std::move(sink)); }
  void write(const TrainStepRecord& record) override;
  void write(const EvalRecord& record) override;
  void write(const WorldChangeRecord& record) override;

 private:
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
};

}  // namespace anvil
