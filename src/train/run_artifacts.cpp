// Locating checkpoints, configs and tokenizers of a run (see run_artifacts.h). A relative
// tokenizer path in meta.json was written relative to the directory `anvil prepare` ran in;
// it is tried as given, then relative to the data folder's parent, which covers both running
// from the same place and the data folder sitting next to its tokenizer.
#include "train/run_artifacts.h"

#include "core/error.h"
#include "data/dataset_meta.h"
#include "io/checkpoint.h"
#include "io/file_util.h"
#include "train/checkpointing.h"

namespace anvil {
namespace {

RunCheckpoint with_config(const std::filesystem::path& dir) {
  RunCheckpoint result{dir, TrainConfig{}};
  apply_config_toml(result.config, read_checkpoint_config(dir), (dir / "config.toml").string());
  return result;
}

}  // namespace

RunCheckpoint find_run_checkpoint(const std::filesystem::path& run_dir) {
  ANVIL_CHECK(std::filesystem::is_directory(run_dir), "[run] {}: no such run directory",
              run_dir.string());
  const CheckpointManager manager(run_dir / "checkpoints", 1);
  const std::optional<LoadedCheckpoint> latest = manager.find_latest_valid();
  ANVIL_CHECK(latest.has_value(),
              "[run] {} has no valid checkpoint (train it with: anvil train "
              "--run-dir {})",
              run_dir.string(), run_dir.string());
  return with_config(latest->dir);
}

RunCheckpoint open_checkpoint(const std::filesystem::path& dir) {
  return with_config(CheckpointManager::load(dir).dir);
}

std::string run_tokenizer_path(const TrainConfig& config) {
  if (!config.data.tokenizer.empty()) return config.data.tokenizer;
  ANVIL_CHECK(!config.data.synthetic,
              "[run] this model was trained on synthetic tokens and has no tokenizer; pass "
              "--tokenizer FILE");
  // The sources of a mixture share one tokenizer; the first one's meta.json names it.
  const std::filesystem::path data_dir =
      config.data.sources.empty() ? config.data.path : config.data.sources.front().path;
  const std::filesystem::path meta_path = data_dir / "meta.json";
  ANVIL_CHECK(std::filesystem::exists(meta_path),
              "[run] cannot find the tokenizer: {} is missing; pass --tokenizer FILE",
              meta_path.string());
  const std::string named = meta_tokenizer_path(read_file(meta_path), meta_path.string());
  const std::filesystem::path as_given = named;
  if (as_given.is_absolute() || std::filesystem::exists(as_given)) return named;
  const std::filesystem::path beside = data_dir.parent_path() / as_given.filename();
  ANVIL_CHECK(std::filesystem::exists(beside),
              "[run] the tokenizer {} named by {} is gone; pass --tokenizer FILE", named,
              meta_path.string());
  return beside.string();
}

}  // namespace anvil
