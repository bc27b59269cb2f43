// Checkpoint storage: the folder layout, the manifest and the commit protocol (DESIGN.md 8).
// A checkpoint is `<checkpoints>/step-NNNNNNN/` holding the trainer's files (safetensors for
// model, optimizer and per-rank state; JSON for small state), `manifest.json` (every file's
// relative path, size and xxhash64, the step, the anvil version and the trainer's "info") and
// a `COMMIT` marker holding the manifest's hash. Invariant: only a folder with COMMIT counts,
// and COMMIT is written last, after every file, the manifest and the folders were fsynced, so
// a crash at any point leaves either the previous checkpoints or a complete new one.
//
// Multi-process protocol: rank 0 calls prepare(step); barrier; every rank writes its files into
// staging_dir(step); barrier; rank 0 calls commit(step, info). Loading picks the newest
// checkpoint whose files all match the manifest, warning about and skipping corrupt ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

struct CheckpointFileRecord {
  std::string path;      // relative to the checkpoint folder, '/'-separated
  uint64_t size = 0;
  std::string xxhash64;  // 16 lower-case hex digits
};

struct LoadedCheckpoint {
  std::filesystem::path dir;
  int64_t step = 0;
  std::string anvil_version;
  nlohmann::json info = nlohmann::json::object();
  std::vector<CheckpointFileRecord> files;
};

class CheckpointManager {
 public:
  // Manages `checkpoints_dir` (created on first prepare), keeping the newest `keep` (>= 1).
  CheckpointManager(std::filesystem::path checkpoints_dir, int keep);

  const std::filesystem::path& root() const { return root_; }
  // Returns "step-0000020" for step 20.
  static std::string step_dir_name(int64_t step);
  // Returns the staging folder of a step ("step-NNNNNNN.partial") without touching the disk.
  std::filesystem::path staging_dir(int64_t step) const;
  // Returns the folder a committed step lives in.
  std::filesystem::path committed_dir(int64_t step) const;
  // Creates a fresh, empty staging folder (removing a stale one); rank 0 calls it, then all
  // ranks meet at a barrier before writing into staging_dir(step).
  std::filesystem::path prepare(int64_t step) const;
  // Hashes and fsyncs every staged file, writes the manifest, moves the folder into place,
  // writes COMMIT, then removes checkpoints beyond `keep` (never the one just committed, so
  // newer leftovers of an abandoned timeline cannot push it out) and older crash leftovers.
  LoadedCheckpoint commit(int64_t step, const nlohmann::json& info);
  // Removes what a failed save of `step` left: its staging folder, and its folder when that
  // was moved into place but never got COMMIT. Never touches a committed checkpoint; problems
  // are warnings (this runs while another error is being reported).
  void abandon(int64_t step) const;
  // Returns the steps that have a COMMIT marker, ascending (their files are not verified).
  std::vector<int64_t> committed_steps() const;
  // Returns the newest committed checkpoint whose files match its manifest, warning with one
  // line per corrupt one skipped (its folder and the file that fails) and one naming the
  // fallback; nullopt when none is valid.
  std::optional<LoadedCheckpoint> find_latest_valid() const;
  // Returns why a checkpoint folder fails verification, naming the file ("model.safetensors
  // checksum mismatch"), or nullopt when every file matches its manifest.
  static std::optional<std::string> verification_problem(const std::filesystem::path& dir);
  // Verifies one checkpoint folder; throws anvil::Error naming the folder and the problem.
  static LoadedCheckpoint load(const std::filesystem::path& dir);

 private:
  void prune(int64_t committed_step) const;

  std::filesystem::path root_;
  int keep_;
};

}  // namespace anvil
