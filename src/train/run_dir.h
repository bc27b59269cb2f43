// The run directory: config.toml (the resolved configuration), metrics.jsonl and
// checkpoints/step-NNNNNNN/. A run directory belongs to one run: resuming continues it, and
// its config.toml always describes the configuration the checkpoints were trained with.
#pragma once

#include <filesystem>
#include <string>

#include "train/config.h"

namespace anvil {

struct RunDir {
  std::filesystem::path root;

  std::filesystem::path config_path() const { return root / "config.toml"; }
  std::filesystem::path metrics_path() const { return root / "metrics.jsonl"; }
  std::filesystem::path checkpoints_dir() const { return root / "checkpoints"; }
};

// Returns "runs/<name>-YYYYmmdd-HHMMSS" (local time) for a run started without --run-dir.
std::filesystem::path default_run_dir(const std::string& name);

// Creates the run directory and its checkpoints folder; throws naming the path on failure.
RunDir create_run_dir(const std::filesystem::path& root);

// Writes the resolved configuration to config.toml atomically.
void write_run_config(const RunDir& run, const TrainConfig& config);

// Returns a shell-safe rendering of an argument (quoted only when needed).
std::string shell_quote(const std::string& arg);

}  // namespace anvil
