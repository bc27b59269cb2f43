// What a training checkpoint holds and how it is written and read back. A checkpoint folder
// (checkpoints/step-NNNNNNN/, committed through io's CheckpointManager) contains:
//   model.safetensors      f32 master weights under their Hugging Face names
//   optimizer.safetensors  AdamW moments, one flat f32 tensor per parameter group
//                          ("adamw.m.<g>", "adamw.v.<g>"), same layout as the groups
//   train_state.json       step, optimizer and scheduler step, data cursor, tokens seen,
//                          the RNG seed, training seconds
//   config.toml            the resolved configuration the run was using
//   config.json            the Hugging Face config, so the folder loads as an HF model
// Everything the next step depends on is in these files, which is what makes resume exact.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "data/cursor.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "optim/adamw.h"
#include "train/config.h"

namespace anvil {

// The loop's position; saved with every checkpoint.
struct TrainProgress {
  int64_t step = 0;          // optimizer steps completed (= the scheduler's step)
  int64_t tokens_seen = 0;   // input tokens processed by those steps
  DataCursor cursor;         // next_sample = first sample of the next global batch
  double train_seconds = 0;  // wall time spent in steps (informational; not replayed)
};

// The run's checkpoints: writes the files above and commits them through CheckpointManager.
class CheckpointStore {
 public:
  // Manages checkpoints under `checkpoints_dir`, keeping the newest `keep`.
  CheckpointStore(std::filesystem::path checkpoints_dir, int keep)
      : manager_(std::move(checkpoints_dir), keep) {}

  // Writes and commits the checkpoint of progress.step; returns its folder.
  std::filesystem::path save(LlamaModel& model, const AdamW& optimizer,
                             const TrainProgress& progress, const TrainConfig& config);
  // Returns the newest committed checkpoint whose files verify (falling back past corrupt
  // ones with a warning), or nullopt when there is none.
  std::optional<std::filesystem::path> latest_valid() const;

 private:
  CheckpointManager manager_;
};

// Returns the checkpoint `--resume` selects: "never" -> none; "auto" -> the store's newest
// valid one (none when the run has none); anything else is a checkpoint folder path.
std::optional<std::filesystem::path> select_resume_checkpoint(const std::string& resume,
                                                              const CheckpointStore& store);

// Loads weights, optimizer state and progress from a checkpoint folder into a model and
// optimizer built for the same architecture; throws naming the file on any mismatch.
TrainProgress load_checkpoint(const std::filesystem::path& dir, LlamaModel& model,
                              AdamW& optimizer);

// Returns the resolved config.toml text stored in a checkpoint folder.
std::string read_checkpoint_config(const std::filesystem::path& dir);

// Writes every parameter of `model` into one safetensors file under its Hugging Face name.
void write_model_safetensors(LlamaModel& model, const std::filesystem::path& path);
// Reads every parameter of `model` from a safetensors file (f32, bf16 or f16 on disk).
void read_model_safetensors(LlamaModel& model, const std::filesystem::path& path);

}  // namespace anvil
