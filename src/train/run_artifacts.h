// Finding what a finished (or running) training run produced, for `anvil generate` and other
// consumers: the checkpoint to load (the newest valid one of a run directory, or a named
// checkpoint folder, verified against its manifest), the configuration it was trained with,
// and the tokenizer of its data (data.tokenizer, else the one the data folder's meta.json names).
#pragma once

#include <filesystem>
#include <string>

#include "train/config.h"

namespace anvil {

struct RunCheckpoint {
  std::filesystem::path dir;  // the verified checkpoint folder
  TrainConfig config;         // its config.toml
};

// Returns the newest valid checkpoint of run directory `run_dir`; throws when it has none.
RunCheckpoint find_run_checkpoint(const std::filesystem::path& run_dir);
// Verifies and returns checkpoint folder `dir`.
RunCheckpoint open_checkpoint(const std::filesystem::path& dir);

// Returns the tokenizer path of a run's data; throws when it cannot be determined (synthetic
// data has none) or the file is gone, saying which flag supplies one.
std::string run_tokenizer_path(const TrainConfig& config);

}  // namespace anvil
