// The run directory: config.toml (the resolved configuration), metrics.jsonl and
// checkpoints/step-NNNNNNN/. A run directory belongs to one run: resuming continues it, and
// its config.toml always describes the configuration the checkpoints were trained with.
// One process at a time writes into it: RunDirLock holds `<run>/run.lock` (pid, host, start
// time) under flock(2), so the kernel releases it when the owner dies however it dies, and a
// lock file that nobody holds is stale by definition (a crash leftover) and is taken over.
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

// Exclusive ownership of a run directory for the lifetime of the object (world rank 0 of a
// train or finetune job takes it before writing anything into the directory).
class RunDirLock {
 public:
  // Creates `root` when missing and locks it; throws "run directory X is in use by pid N on
  // host H (started T)" at once when another process holds it, and warns when it takes over
  // a stale lock file left by a process that died.
  explicit RunDirLock(const std::filesystem::path& root);
  // Removes the lock file (and the directory when this lock created it and it stayed empty).
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // Returns the lock file's path, `<root>/run.lock`.
  static std::filesystem::path lock_path(const std::filesystem::path& root);

 private:
  std::filesystem::path root_;
  int fd_ = -1;
  bool created_root_ = false;
};

// Returns a shell-safe rendering of an argument (quoted only when needed).
std::string shell_quote(const std::string& arg);

}  // namespace anvil
