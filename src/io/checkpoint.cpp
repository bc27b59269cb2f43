// Checkpoint commit, verification, fallback and rotation. Every step that makes a checkpoint
// visible is ordered after the fsyncs it depends on; deletion removes COMMIT first so a folder
// half removed by a crash reads as uncommitted rather than corrupt.
#include "io/checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/log.h"
#include "io/file_util.h"
#include "io/json_util.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kManifestName = "manifest.json";
constexpr std::string_view kCommitName = "COMMIT";
constexpr std::string_view kStagingSuffix = ".partial";
constexpr std::string_view kCommitPrefix = "manifest_xxhash64=";
constexpr std::string_view kManifestFormat = "anvil-checkpoint";
constexpr int kManifestFormatVersion = 1;
// The trainer's "info" is free-form, but a manifest nested deeper than this is not ours.
constexpr int kMaxManifestDepth = 32;

// Why a checkpoint cannot be trusted, in a few words ("model.safetensors checksum mismatch").
struct CheckpointProblem {
  std::string reason;
};

template <typename... Args>
[[noreturn]] void corrupt(fmt::format_string<Args...> format, Args&&... args) {
  throw CheckpointProblem{fmt::format(format, std::forward<Args>(args)...)};
}

// Returns N for "step-N" (digits only), nullopt for anything else (staging folders included).
std::optional<int64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view prefix = "step-";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 18) return std::nullopt;
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  int64_t step = 0;
  for (char c : name.substr(prefix.size())) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

bool is_safe_relative_path(const std::string& path) {
  const fs::path relative(path);
  if (path.empty() || !relative.is_relative()) return false;
  for (const fs::path& part : relative)
    if (part == ".." || part == ".") return false;
  return true;
}

const json& required_field(const json& object, const char* key, const char* where) {
  auto found = object.find(key);
  if (found == object.end()) corrupt("{} has no \"{}\"", where, key);
  return *found;
}

// Verifies a checkpoint folder against its manifest; throws CheckpointProblem when it fails.
LoadedCheckpoint verify_checkpoint(const fs::path& dir) {
  std::error_code error;
  if (!fs::is_regular_file(dir / kCommitName, error)) corrupt("not committed (no COMMIT marker)");
  if (!fs::is_regular_file(dir / kManifestName, error)) corrupt("manifest.json is missing");
  const std::string commit = read_file(dir / kCommitName);
  if (commit.rfind(kCommitPrefix, 0) != 0) corrupt("COMMIT marker is malformed");
  const std::string expected_manifest_hash =
      commit.substr(kCommitPrefix.size(), commit.find('\n') - kCommitPrefix.size());
  const std::string manifest_text = read_file(dir / kManifestName);
  if (hash_hex(XXH64(manifest_text.data(), manifest_text.size(), 0)) != expected_manifest_hash)
    corrupt("manifest.json checksum mismatch");

  json manifest;
  try {
    manifest = parse_json_strict(manifest_text, "manifest.json", kMaxManifestDepth);
  } catch (const Error& e) {
    corrupt("{}", e.what());
  }
  if (!manifest.is_object()) corrupt("manifest.json is not an object");
  if (manifest.value("format", "") != kManifestFormat)
    corrupt("manifest.json is not an anvil checkpoint manifest");
  const json& version = required_field(manifest, "format_version", "manifest.json");
  if (!version.is_number_integer() || version.get<int64_t>() != kManifestFormatVersion)
    corrupt("manifest.json has unsupported format_version {}", quote_for_message(version.dump()));

  LoadedCheckpoint loaded;
  loaded.dir = dir;
  const json& step = required_field(manifest, "step", "manifest.json");
  if (!step.is_number_integer() || step.get<int64_t>() < 0)
    corrupt("manifest.json step is not a non-negative integer");
  loaded.step = step.get<int64_t>();
  std::optional<int64_t> dir_step = parse_step_dir_name(dir.filename().string());
  if (dir_step && *dir_step != loaded.step)
    corrupt("manifest.json says step {}, the folder says {}", loaded.step, *dir_step);
  const json& anvil_version = required_field(manifest, "anvil_version", "manifest.json");
  if (anvil_version.is_string()) loaded.anvil_version = anvil_version.get<std::string>();
  loaded.info = manifest.value("info", json::object());

  const json& files = required_field(manifest, "files", "manifest.json");
  if (!files.is_array()) corrupt("manifest.json \"files\" is not an array");
  for (const json& file : files) {
    if (!file.is_object()) corrupt("manifest.json has a file record that is not an object");
    const json& path = required_field(file, "path", "a manifest file record");
    const json& size = required_field(file, "size", "a manifest file record");
    const json& hash = required_field(file, "xxhash64", "a manifest file record");
    if (!path.is_string() || !is_safe_relative_path(path.get<std::string>()) ||
        !size.is_number_unsigned() || !hash.is_string())
      corrupt("manifest.json has a malformed file record {}", quote_for_message(file.dump()));
    CheckpointFileRecord record{path.get<std::string>(), size.get<uint64_t>(),
                                hash.get<std::string>()};
    const fs::path on_disk = dir / record.path;
    if (!fs::is_regular_file(on_disk, error)) corrupt("{} is missing", record.path);
    const uint64_t actual_size = fs::file_size(on_disk, error);
    if (error || actual_size != record.size)
      corrupt("{} has {} bytes, the manifest says {}", record.path, actual_size, record.size);
    if (hash_hex(xxhash64_file(on_disk)) != record.xxhash64)
      corrupt("{} checksum mismatch", record.path);
    loaded.files.push_back(std::move(record));
  }
  return loaded;
}

// Returns the verified checkpoint or the reason it is not valid (I/O errors included).
std::optional<LoadedCheckpoint> try_verify(const fs::path& dir, std::string& reason) {
  try {
    return verify_checkpoint(dir);
  } catch (const CheckpointProblem& problem) {
    reason = problem.reason;
  } catch (const std::exception& e) {  // I/O failures and malformed JSON values
    reason = e.what();
  }
  return std::nullopt;
}

// Removes a checkpoint folder, un-committing it durably before deleting its files.
void remove_checkpoint_dir(const fs::path& dir) {
  std::error_code error;
  if (fs::remove(dir / kCommitName, error)) fsync_dir(dir);
  fs::remove_all(dir, error);
  ANVIL_CHECK(!error, "[checkpoint] cannot remove {}: {}", dir.string(), error.message());
}

}  // namespace

CheckpointManager::CheckpointManager(fs::path checkpoints_dir, int keep)
    : root_(std::move(checkpoints_dir)), keep_(keep) {
  ANVIL_CHECK(keep_ >= 1, "[checkpoint] keep must be at least 1 (got {})", keep_);
}

std::string CheckpointManager::step_dir_name(int64_t step) {
  ANVIL_CHECK(step >= 0, "[checkpoint] step {} is negative", step);
  return fmt::format("step-{:07d}", step);
}

fs::path CheckpointManager::staging_dir(int64_t step) const {
  return root_ / (step_dir_name(step) + std::string(kStagingSuffix));
}

fs::path CheckpointManager::committed_dir(int64_t step) const {
  return root_ / step_dir_name(step);
}

fs::path CheckpointManager::prepare(int64_t step) const {
  const fs::path staging = staging_dir(step);
  std::error_code error;
  fs::remove_all(staging, error);
  ANVIL_CHECK(!error, "[checkpoint] cannot remove stale {}: {}", staging.string(),
              error.message());
  fs::create_directories(staging, error);
  ANVIL_CHECK(!error, "[checkpoint] cannot create {}: {}", staging.string(), error.message());
  fsync_dir(root_);
  return staging;
}

LoadedCheckpoint CheckpointManager::commit(int64_t step, const json& info) {
  ANVIL_CHECK(info.is_object() || info.is_null(), "[checkpoint] info must be a JSON object");
  const fs::path staging = staging_dir(step);
  std::error_code error;
  ANVIL_CHECK(fs::is_directory(staging, error),
              "[checkpoint] {} does not exist: call prepare({}) before writing files",
              staging.string(), step);

  LoadedCheckpoint committed;
  committed.step = step;
  committed.anvil_version = ANVIL_VERSION;
  committed.info = info.is_null() ? json::object() : info;
  std::vector<fs::path> subdirs;
  fs::recursive_directory_iterator listing(staging, error);
  ANVIL_CHECK(!error, "[checkpoint] cannot list {}: {}", staging.string(), error.message());
  for (const fs::directory_entry& entry : listing) {
    const fs::file_status status = entry.symlink_status();
    const std::string relative = entry.path().lexically_relative(staging).generic_string();
    if (fs::is_directory(status)) {
      subdirs.push_back(entry.path());
      continue;
    }
    ANVIL_CHECK(fs::is_regular_file(status),
                "[checkpoint] {}: only regular files can be checkpointed", entry.path().string());
    if (relative == kManifestName || relative == kCommitName) continue;
    fsync_file(entry.path());
    const uint64_t size = fs::file_size(entry.path(), error);
    ANVIL_CHECK(!error, "[checkpoint] cannot stat {}: {}", entry.path().string(), error.message());
    committed.files.push_back({relative, size, hash_hex(xxhash64_file(entry.path()))});
  }
  std::sort(committed.files.begin(), committed.files.end(),
            [](const auto& a, const auto& b) { return a.path < b.path; });
  for (const fs::path& subdir : subdirs) fsync_dir(subdir);

  json files = json::array();
  for (const CheckpointFileRecord& file : committed.files)
    files.push_back({{"path", file.path}, {"size", file.size}, {"xxhash64", file.xxhash64}});
  const json manifest = {{"format", kManifestFormat},
                         {"format_version", kManifestFormatVersion},
                         {"step", step},
                         {"anvil_version", committed.anvil_version},
                         {"files", files},
                         {"info", committed.info}};
  const std::string manifest_text = manifest.dump(2) + "\n";
  write_file_atomic(staging / kManifestName, manifest_text);

  const fs::path final_dir = committed_dir(step);
  if (fs::exists(final_dir, error)) {
    if (fs::exists(final_dir / kCommitName, error))
      log_warn("[checkpoint] replacing the committed checkpoint {}", final_dir.string());
    remove_checkpoint_dir(final_dir);
  }
  fs::rename(staging, final_dir, error);
  ANVIL_CHECK(!error, "[checkpoint] cannot rename {} to {}: {}", staging.string(),
              final_dir.string(), error.message());
  fsync_dir(root_);
  write_file_atomic(final_dir / kCommitName,
                    fmt::format("{}{}\n", kCommitPrefix,
                                hash_hex(XXH64(manifest_text.data(), manifest_text.size(), 0))));
  committed.dir = final_dir;
  prune(step);
  return committed;
}

void CheckpointManager::abandon(int64_t step) const {
  std::error_code error;
  for (const fs::path& dir : {staging_dir(step), committed_dir(step)}) {
    if (!fs::exists(dir, error) || fs::exists(dir / kCommitName, error)) continue;
    fs::remove_all(dir, error);
    if (error) log_warn("[checkpoint] cannot remove {}: {}", dir.string(), error.message());
  }
}

std::vector<int64_t> CheckpointManager::committed_steps() const {
  std::vector<int64_t> steps;
  std::error_code error;
  fs::directory_iterator listing(root_, error);
  if (error) return steps;  // no checkpoints folder yet
  for (const fs::directory_entry& entry : listing) {
    std::optional<int64_t> step = parse_step_dir_name(entry.path().filename().string());
    if (step && fs::is_regular_file(entry.path() / kCommitName, error)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<LoadedCheckpoint> CheckpointManager::find_latest_valid() const {
  std::vector<int64_t> steps = committed_steps();
  bool skipped = false;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    std::string reason;
    std::optional<LoadedCheckpoint> loaded = try_verify(committed_dir(*it), reason);
    if (loaded) {
      if (skipped)
        log_warn("[checkpoint] falling back to {}, the newest checkpoint that verifies",
                 loaded->dir.string());
      return loaded;
    }
    log_warn("[checkpoint] skipping {}: it fails verification ({})",
             committed_dir(*it).string(), reason);
    skipped = true;
  }
  if (skipped) log_warn("[checkpoint] no committed checkpoint in {} verifies", root_.string());
  return std::nullopt;
}

std::optional<std::string> CheckpointManager::verification_problem(const fs::path& dir) {
  std::string reason;
  if (try_verify(dir, reason)) return std::nullopt;
  return reason;
}

LoadedCheckpoint CheckpointManager::load(const fs::path& dir) {
  std::error_code error;
  ANVIL_CHECK(fs::is_directory(dir, error), "[checkpoint] {}: no such checkpoint folder",
              dir.string());
  std::string reason;
  std::optional<LoadedCheckpoint> loaded = try_verify(dir, reason);
  ANVIL_CHECK(loaded.has_value(), "[checkpoint] {} is not a valid checkpoint: {}", dir.string(),
              reason);
  return *loaded;
}

void CheckpointManager::prune(int64_t committed_step) const {
  const std::vector<int64_t> steps = committed_steps();
  size_t excess = steps.size() > static_cast<size_t>(keep_) ? steps.size() - keep_ : 0;
  for (size_t i = 0; i < steps.size() && excess > 0; ++i) {
    // Steps newer than this commit are what a resume fell back past (corrupt, or a timeline
    // that was abandoned); counting them must never remove the checkpoint just committed.
    if (steps[i] == committed_step) continue;
    remove_checkpoint_dir(committed_dir(steps[i]));
    --excess;
  }

  // Leftovers of crashed saves older than this commit: staging folders and folders that were
  // moved into place but never got their COMMIT.
  std::error_code error;
  std::vector<fs::path> leftovers;
  fs::directory_iterator listing(root_, error);
  ANVIL_CHECK(!error, "[checkpoint] cannot list {}: {}", root_.string(), error.message());
  for (const fs::directory_entry& entry : listing) {
    std::string name = entry.path().filename().string();
    const bool staging = name.size() > kStagingSuffix.size() &&
                         name.substr(name.size() - kStagingSuffix.size()) == kStagingSuffix;
    if (staging) name.resize(name.size() - kStagingSuffix.size());
    std::optional<int64_t> step = parse_step_dir_name(name);
    if (!step || *step >= committed_step) continue;
    if (staging || !fs::exists(entry.path() / kCommitName, error))
      leftovers.push_back(entry.path());
  }
  for (const fs::path& leftover : leftovers) remove_checkpoint_dir(leftover);
  fsync_dir(root_);
}

}  // namespace anvil
