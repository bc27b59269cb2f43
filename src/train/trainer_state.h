// The Trainer object behind run_training (trainer.h), shared by the files that implement it:
// trainer_setup.cpp builds and resumes the run (backend, mesh, model, engine, initial weights
// or checkpoint), trainer.cpp runs the loop (steps, evaluation, checkpoints, the summary).
// Private to the training layer: nothing outside src/train includes it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "model/llama.h"
#include "observe/metrics.h"
#include "observe/profiler.h"
#include "observe/progress.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "parallel/engine.h"
#include "parallel/mesh.h"
#include "train/checkpointing.h"
#include "train/data_sources.h"
#include "train/host_batch.h"
#include "train/run_dir.h"
#include "train/trainer.h"
#include "train/training_benchmarks.h"

namespace anvil {

// The sharding and memory report of the run (sharding_report.h), in the run directory.
inline constexpr const char* kShardingReportFile = "sharding.json";

struct StepOutcome {
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double seconds = 0;
  bool skipped = false;  // not applied: the loss or gradient norm was not finite
  double loss_scale = 0;  // the dynamic loss scale the step ran at (0: none)
  HostWaits waits;        // the host's blocking waits on the device during the step
};

class Trainer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Trainer(const TrainRunOptions& options);
  TrainResult run();

 private:
  void start_or_resume();
  void load_initial_weights();
  // Loads the frozen base of a LoRA run from model.init_from (checked against [model]).
  void load_base_model();
  // Prints the sharding and memory report and writes it to the run directory (collective).
  void report_sharding();
  StepOutcome train_step(int64_t step);
  EvalRecord evaluate(int64_t step);
  // Returns the summed loss of `samples` validation samples of `source` (collective).
  LossSum score_validation(SampleSource& source, int64_t samples);
  // Fills a mixture's per-source token counts into `record` and reports each source that
  // ran out during the step just taken, `samples_before` being the cursor before it.
  void record_sources(TrainStepRecord& record, int64_t samples_before);
  // Saves a checkpoint of the current step; with checkpoint.on_error = "continue" a failed
  // save is a warning (unless `stopping`: a stop must not lose the run silently).
  void save_checkpoint(bool stopping);
  // Handles a step the engine did not apply: throws, or counts it as skipped.
  void handle_nonfinite_step(int64_t step, const StepOutcome& outcome);
  // Returns "resume from <dir>" or a note that the run has no checkpoint yet.
  std::string resume_hint() const;
  void log_resume_config_changes(const std::string& saved_config_toml);
  // Prints a line on world rank 0 only.
  void message(const std::string& line);
  // Tells the watchdog what a collective that hangs from now on belongs to.
  void watch(int64_t step, const char* phase) {
    if (!watchdog_) return;
    watchdog_->set_step(step);
    watchdog_->set_phase(phase);
  }

  const TrainRunOptions& options_;
  const TrainConfig& config_;
  Communicator& world_;
  bool root_;
  // Before every member whose construction runs collectives.
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  RunDir run_;
  std::unique_ptr<Backend> backend_;
  // The pre-flight's planned peak per device (0: no check ran), beside the measured one in
  // every metrics record. Set before anything large is opened or allocated.
  int64_t planned_peak_bytes_;
  TrainingData data_;
  LlamaConfig llama_;
  // The world the mesh splits: world_ itself for host tensors, else the backend's device
  // communicator over it (comm/device_communicator.h); made blocking when
  // parallel.overlap = false.
  std::unique_ptr<Communicator> device_world_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<DataParallelEngine> engine_;
  LrSchedule schedule_;
  CheckpointStore store_;
  TrainProgress progress_;
  // Set when training.loss_scale = "dynamic"; its state is mirrored in progress_.loss_scale.
  std::optional<DynamicLossScaler> loss_scaler_;
  ProgressPrinter printer_;
  int micro_batch_;
  int grad_accum_;
  int seq_len_;
  int eval_batch_size_;
  HostBatch train_batch_;
  HostBatch eval_batch_;
  TrainingBenchmarks benchmarks_;
  StepProfiler profiler_;
  int64_t last_saved_step_ = -1;
  std::optional<WorldChangeRecord> world_change_;  // set when a resume changed the world size
  int64_t checkpoint_failures_ = 0;
  std::filesystem::path last_checkpoint_;
  Clock::time_point run_start_ = Clock::now();
};

}  // namespace anvil
