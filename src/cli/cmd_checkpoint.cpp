// `anvil checkpoint verify RUN|DIR`: checks every file of every committed checkpoint of a run
// (RUN/checkpoints/step-*) or of one checkpoint folder against its manifest, the same check
// `--resume` applies before trusting one. One line per folder; staging leftovers (*.partial)
// and folders without COMMIT are listed as such but are not errors, since resume ignores them.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "io/checkpoint.h"

namespace anvil::cli {
namespace {

namespace fs = std::filesystem;

// Returns true when `dir` looks like one checkpoint folder rather than a run directory.
bool is_checkpoint_folder(const fs::path& dir) {
  std::error_code error;
  return fs::exists(dir / "manifest.json", error) || fs::exists(dir / "COMMIT", error);
}

// Prints the verdict on one folder; returns true when it is a committed checkpoint that fails.
bool report_folder(const fs::path& dir) {
  std::error_code error;
  const std::string name = dir.filename().string();
  if (name.size() > 8 && name.ends_with(".partial")) {
    fmt::print("{}: staging leftover of an unfinished save (ignored by resume)\n", dir.string());
    return false;
  }
  if (!fs::is_regular_file(dir / "COMMIT", error)) {
    fmt::print("{}: not committed, no COMMIT marker (ignored by resume)\n", dir.string());
    return false;
  }
  const std::optional<std::string> problem = CheckpointManager::verification_problem(dir);
  if (problem) {
    fmt::print("{}: FAILED: {}\n", dir.string(), *problem);
    return true;
  }
  fmt::print("{}: ok\n", dir.string());
  return false;
}

int run_checkpoint_verify(const std::vector<std::string>& args) {
  CLI::App app(
      "Verify checkpoints against their manifests: every file's presence, size and xxhash64, "
      "and the manifest's own hash in COMMIT. TARGET is a run directory (every folder under "
      "TARGET/checkpoints) or one checkpoint folder. Prints one line per folder: ok, or the "
      "first problem naming the file; staging leftovers (*.partial) and folders without COMMIT "
      "are listed as such. Exits 1 when any committed checkpoint fails, 0 otherwise.",
      "anvil checkpoint verify");
  std::string target;
  app.add_option("target", target, "run directory or checkpoint folder")->required();
  if (!parse_args(app, args)) return 0;

  const fs::path path(target);
  std::error_code error;
  ANVIL_CHECK(fs::is_directory(path, error), "{}: no such run directory or checkpoint folder",
              target);
  if (is_checkpoint_folder(path)) return report_folder(path) ? 1 : 0;

  const fs::path root = path / "checkpoints";
  ANVIL_CHECK(fs::is_directory(root, error),
              "{}: neither a checkpoint folder nor a run directory with checkpoints/", target);
  std::vector<fs::path> folders;
  for (const fs::directory_entry& entry : fs::directory_iterator(root))
    if (entry.is_directory() && entry.path().filename().string().starts_with("step-"))
      folders.push_back(entry.path());
  std::sort(folders.begin(), folders.end());
  int failed = 0, committed = 0;
  for (const fs::path& folder : folders) {
    failed += report_folder(folder);
    committed += fs::is_regular_file(folder / "COMMIT", error);
  }
  fmt::print("{} committed checkpoint(s) in {}, {} failed\n", committed, root.string(), failed);
  return failed > 0 ? 1 : 0;
}

}  // namespace

ANVIL_COMMAND("checkpoint verify",
              "check every file of a run's checkpoints (or one folder) against its manifest", 46,
              run_checkpoint_verify);

}  // namespace anvil::cli
