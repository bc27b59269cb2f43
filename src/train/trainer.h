// The training loop of `anvil train` and `anvil finetune`: micro-batches accumulated into one global batch per
// optimizer step, the loss normalised by the counted target tokens of the whole global batch
// (so the result equals PyTorch's mean cross-entropy over that batch), global-norm clipping,
// the learning-rate schedule, periodic evaluation and checkpoints, exact resume, and a
// graceful stop on SIGINT/SIGTERM. It runs on every rank of an MPI job (or one process):
// the parallel engine applies data parallelism and ZeRO, and N ranks train exactly what one
// process with the same global batch trains (docs/distributed.md). With lora.r > 0 the model
// carries LoRA adapters on the frozen base named by model.init_from, and everything above
// (optimizer, clipping, reduction, checkpoints) applies to the adapters only (docs/finetune.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/mesh.h"
#include "train/config.h"
#include "observe/profiler.h"

namespace anvil {

class Backend;

struct TrainRunOptions {
  TrainConfig config;  // resolved and validated
  std::filesystem::path run_dir;
  std::string resume = "auto";  // auto | never | checkpoint folder
  std::string backend = "cpu";
  std::string resume_command;  // the exact command that continues this run
  Communicator* world = nullptr;  // the ranks that train together; null: anvil::world()
  // Build everything, print and write the sharding and memory report, train nothing.
  bool dry_run = false;
  // Runs on every rank once the backend exists, before the data is opened or anything large
  // allocated: the pre-flight memory check (plan/preflight.h, set by the commands, which sit
  // above the planner), throwing when the run will not fit. Returns the planned peak per
  // device, written beside the measured peak in metrics.jsonl (0: none). Null: no check.
  std::function<int64_t(const TrainConfig&, const Backend&, Communicator&)> preflight;
};

struct TrainResult {
  std::filesystem::path run_dir;
  int64_t final_step = 0;  // steps completed, counting earlier runs
  int64_t steps_this_run = 0;
  int64_t tokens_this_run = 0;  // input tokens of the global batches trained by this run
  double tokens_per_s = 0;      // steady state: steps after the first two of this run
  double flops_per_token = 0;
  double gflops_per_s = 0;
  double step_seconds = 0;      // mean over the steady-state steps (0 when there were none)
  // Payload bytes rank 0 handed to each mesh axis per steady-state step (train_step only).
  MeshTraffic traffic_per_step;
  double peak_rss_mb = 0;
  // The most bytes this rank's backend held at once (MiB, as counted by category; host
  // memory for the CPU backends).
  double peak_device_mb = 0;
  double final_loss = 0;       // training loss of the last step
  double final_val_loss = -1;  // of the last evaluation; -1 when none ran
  bool stopped_by_signal = false;
  int64_t skipped_steps = 0;        // non-finite steps skipped (training.skip_nonfinite), all legs
  int64_t checkpoint_failures = 0;  // saves that failed this run (checkpoint.on_error = continue)
  std::filesystem::path last_checkpoint;
  std::vector<TraceRankSummary> trace;  // every rank's totals of the profile window, if any
};

// Runs (or resumes) a training run; throws anvil::Error on bad input or a failed checkpoint
// save, DivergenceError (exit status kExitDiverged) when training diverged.
TrainResult run_training(const TrainRunOptions& options);

// Returns the one-line JSON summary printed last with --logging.json=true.
std::string train_summary_json(const TrainResult& result);

}  // namespace anvil
