// What a training checkpoint holds and how it is written and read back. A checkpoint folder
// (checkpoints/step-NNNNNNN/, committed through io's CheckpointManager) contains:
//   model.safetensors      f32 master weights under their Hugging Face names (world rank 0)
//   optimizer*.safetensors AdamW moments, "adamw.m.<g>" / "adamw.v.<g>" per parameter group:
//                          optimizer.safetensors with one fsdp shard, else one file per shard
//                          written by its owner (parallel/sharded_checkpoint.h)
//   train_state.json       step, optimizer and scheduler step, skipped steps, data cursor,
//                          tokens seen, the RNG seed, training seconds, the mesh that wrote it
//   config.toml            the resolved configuration the run was using
//   config.json            the Hugging Face config, so the folder loads as an HF model
// A LoRA run's checkpoint holds the adapters instead of model.safetensors and config.json:
//   adapter_config.json, adapter_model.safetensors   the PEFT adapter (f32; world rank 0)
//   base_model.json        the base's path (model.init_from) and its config.json hash
// so the folder is itself a PEFT adapter directory (anvil generate --adapter accepts it).
// Everything the next step depends on is in these files, which is what makes resume exact;
// any mesh can load a checkpoint that any other mesh wrote. Saving and selecting are
// collective over the world: rank 0 prepares, verifies and commits, every rank writes its part.
// A save that fails anywhere (disk full, a failed fsync or close) fails on every rank alike:
// after each phase the ranks agree on a success flag, so none waits for a peer that gave up
// and none commits, and the staging folder is removed; the previous checkpoints stay as
// they were.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "core/divergence_error.h"
#include "core/error.h"
#include "data/cursor.h"
#include "io/checkpoint.h"
#include "optim/loss_scaler.h"
#include "parallel/engine.h"
#include "train/config.h"

namespace anvil {

// The loop's position; saved with every checkpoint.
struct TrainProgress {
  int64_t step = 0;          // training steps completed (= the scheduler's step)
  int64_t tokens_seen = 0;   // input tokens processed by those steps
  // Steps skipped for a non-finite loss or gradient norm (training.skip_nonfinite): they
  // count in `step` and moved the data cursor, but not AdamW, whose step count is
  // step - skipped_steps. `consecutive_skipped` is the current run of them.
  int64_t skipped_steps = 0;
  int64_t consecutive_skipped = 0;
  // Dynamic loss scaling's scale and clean-step count (training.loss_scale = "dynamic");
  // unset when the run does not scale its loss. Overflow skips count in skipped_steps.
  std::optional<LossScalerState> loss_scale;
  DataCursor cursor;         // next_sample = first sample of the next global batch
  double train_seconds = 0;  // wall time spent in steps (informational; not replayed)
  int saved_world = 0;  // when loaded: the data-parallel world that wrote it (0: not recorded)
};

// A checkpoint could not be written; every rank throws it with the same message, and the
// previous checkpoints are intact.
class CheckpointSaveError : public Error {
 public:
  using Error::Error;
};

// The run's checkpoints: writes the files above and commits them through CheckpointManager.
class CheckpointStore {
 public:
  // Manages checkpoints under `checkpoints_dir`, keeping the newest `keep`.
  CheckpointStore(std::filesystem::path checkpoints_dir, int keep)
      : manager_(std::move(checkpoints_dir), keep) {}

  // Writes and commits the checkpoint of progress.step; returns its folder. Collective: rank
  // 0 prepares the staging folder, every rank writes (and fsyncs) its files, and rank 0
  // commits once all have, so COMMIT never names a folder with a missing shard. Throws
  // CheckpointSaveError (DivergenceError for non-finite weights) on every rank when any rank
  // failed, naming the file and the system's reason, after removing the partial files.
  std::filesystem::path save(DataParallelEngine& engine, const TrainProgress& progress,
                             const TrainConfig& config);
  // Returns the newest committed checkpoint whose files verify (falling back past corrupt
  // ones with a warning), or nullopt when there is none.
  std::optional<std::filesystem::path> latest_valid() const;

 private:
  // Writes this rank's files of the checkpoint into its staging folder.
  void write_files(DataParallelEngine& engine, const TrainProgress& progress,
                   const TrainConfig& config);

  CheckpointManager manager_;
};

// Returns the checkpoint `--resume` selects: "never" -> none; "auto" -> the store's newest
// valid one (none when the run has none); anything else is a checkpoint folder path.
// Collective: rank 0 verifies the files and every rank gets its choice.
std::optional<std::filesystem::path> select_resume_checkpoint(const std::string& resume,
                                                              const CheckpointStore& store,
                                                              Communicator& world);

// Loads weights (LoRA: the adapters; the base must be loaded already), optimizer state and
// progress from a checkpoint folder (written by any mesh) into an engine built for the same
// architecture; throws naming the file on any mismatch.
TrainProgress load_checkpoint(const std::filesystem::path& dir, DataParallelEngine& engine);

// Returns the resolved config.toml text stored in a checkpoint folder.
std::string read_checkpoint_config(const std::filesystem::path& dir);

}  // namespace anvil
