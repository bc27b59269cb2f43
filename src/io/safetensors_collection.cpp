// Sharded safetensors: index parsing with cross-checks against the shards, and the Hugging Face
// sharding rule for writing (see the header for the rule and the naming).
#include "io/safetensors_collection.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/error.h"
#include "io/file_util.h"
#include "io/json_util.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// An index is {"metadata": {...}, "weight_map": {...}}; metadata may hold small nested values.
constexpr int kMaxIndexDepth = 3;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Returns true for "model-00001-of-00003.safetensors": the names this module writes.
bool is_shard_name(std::string_view name) {
  constexpr std::string_view prefix = "model-";
  constexpr std::string_view suffix = ".safetensors";
  if (name.size() != prefix.size() + 5 + 4 + 5 + suffix.size()) return false;
  if (name.substr(0, prefix.size()) != prefix || !ends_with(name, suffix)) return false;
  std::string_view middle = name.substr(prefix.size(), 14);
  auto all_digits = [](std::string_view text) {
    return std::all_of(text.begin(), text.end(),
                       [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
  };
  return all_digits(middle.substr(0, 5)) && middle.substr(5, 4) == "-of-" &&
         all_digits(middle.substr(9, 5));
}

std::string shard_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

// Checks that a shard file named by the index stays inside the checkpoint directory.
void check_shard_path(const std::string& file, const std::string& tensor, const fs::path& index) {
  const fs::path relative(file);
  bool inside = !file.empty() && relative.is_relative();
  for (const fs::path& part : relative) inside = inside && part != "..";
  ANVIL_CHECK(inside,
              "[safetensors] {}: tensor '{}' maps to '{}', which is not a file inside the "
              "checkpoint directory",
              index.string(), quote_for_message(tensor), quote_for_message(file));
}

}  // namespace

SafetensorsCollection SafetensorsCollection::open(const fs::path& path) {
  std::error_code error;
  fs::path index_path;
  fs::path single_path;
  if (fs::is_directory(path, error)) {
    if (fs::exists(path / kSafetensorsIndexName, error)) {
      index_path = path / kSafetensorsIndexName;
    } else if (fs::exists(path / kSafetensorsSingleName, error)) {
      single_path = path / kSafetensorsSingleName;
    } else {
      ANVIL_FAIL("[safetensors] {}: neither {} nor {} found", path.string(),
                 kSafetensorsIndexName, kSafetensorsSingleName);
    }
  } else if (ends_with(path.filename().string(), ".index.json")) {
    index_path = path;
  } else {
    single_path = path;
  }

  SafetensorsCollection collection;
  if (!single_path.empty()) {
    collection.source_ = single_path;
    collection.files_.push_back(
        std::make_unique<SafetensorsFile>(SafetensorsFile::open(single_path)));
    for (const SafetensorsEntry& entry : collection.files_.back()->entries())
      collection.entries_.emplace(entry.name, &entry);
    return collection;
  }

  collection.source_ = index_path;
  const std::string subject = fmt::format("[safetensors] {}", index_path.string());
  const json index = parse_json_strict(read_file(index_path), subject, kMaxIndexDepth);
  ANVIL_CHECK(index.is_object(), "{}: the index is not a JSON object", subject);
  auto metadata = index.find("metadata");
  if (metadata != index.end()) {
    ANVIL_CHECK(metadata->is_object(), "{}: \"metadata\" is not an object", subject);
    collection.index_metadata_ = *metadata;
  }
  auto weight_map = index.find("weight_map");
  ANVIL_CHECK(weight_map != index.end() && weight_map->is_object(),
              "{}: \"weight_map\" is missing or not an object", subject);

  std::map<std::string, std::vector<std::string>> tensors_by_file;
  for (const auto& [tensor, file] : weight_map->items()) {
    ANVIL_CHECK(file.is_string(), "{}: weight_map entry for tensor '{}' is not a file name",
                subject, quote_for_message(tensor));
    check_shard_path(file.get<std::string>(), tensor, index_path);
    tensors_by_file[file.get<std::string>()].push_back(tensor);
  }

  const fs::path dir = index_path.parent_path();
  for (const auto& [file, tensors] : tensors_by_file) {
    ANVIL_CHECK(fs::is_regular_file(dir / file, error),
                "{}: shard '{}' (listed for tensor '{}') does not exist", subject, file,
                tensors.front());
    collection.files_.push_back(
        std::make_unique<SafetensorsFile>(SafetensorsFile::open(dir / file)));
    const SafetensorsFile& shard = *collection.files_.back();
    for (const std::string& tensor : tensors) {
      const SafetensorsEntry* entry = shard.find(tensor);
      ANVIL_CHECK(entry != nullptr,
                  "{}: tensor '{}' is listed in shard '{}' but the shard has no such tensor",
                  subject, quote_for_message(tensor), file);
      collection.entries_.emplace(tensor, entry);
    }
    for (const SafetensorsEntry& entry : shard.entries()) {
      ANVIL_CHECK(std::find(tensors.begin(), tensors.end(), entry.name) != tensors.end(),
                  "{}: shard '{}' holds tensor '{}' which the weight_map does not list for it",
                  subject, file, quote_for_message(entry.name));
    }
  }
  return collection;
}

std::vector<std::string> SafetensorsCollection::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

const SafetensorsEntry* SafetensorsCollection::find(std::string_view name) const {
  auto found = entries_.find(name);
  return found == entries_.end() ? nullptr : found->second;
}

const SafetensorsEntry& SafetensorsCollection::at(std::string_view name) const {
  const SafetensorsEntry* entry = find(name);
  ANVIL_CHECK(entry != nullptr, "[safetensors] {}: no tensor '{}'", source_.string(), name);
  return *entry;
}

ShardedWriteResult write_safetensors_sharded(const SafetensorsWriter& tensors, const fs::path& dir,
                                             uint64_t max_shard_bytes) {
  ANVIL_CHECK(max_shard_bytes > 0, "[safetensors] the maximum shard size must be positive");
  std::error_code error;
  fs::create_directories(dir, error);
  ANVIL_CHECK(!error, "[safetensors] cannot create {}: {}", dir.string(), error.message());

  // Hugging Face's rule (huggingface_hub split_state_dict_into_shards_factory).
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  ShardedWriteResult result;
  const auto& pending = tensors.tensors();
  for (size_t i = 0; i < pending.size(); ++i) {
    const uint64_t bytes = pending[i].nbytes;
    result.total_size += bytes;
    if (bytes > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));

  result.indexed = shards.size() > 1;
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name =
        result.indexed ? shard_name(s, shards.size()) : std::string(kSafetensorsSingleName);
    SafetensorsWriter shard;
    for (const auto& [key, value] : tensors.metadata()) shard.set_metadata(key, value);
    for (size_t i : shards[s]) {
      const SafetensorsWriter::PendingTensor& tensor = pending[i];
      shard.add(tensor.name, tensor.dtype, tensor.shape, tensor.bytes(), tensor.nbytes);
      weight_map[tensor.name] = name;
    }
    shard.write(dir / name);
    result.files.push_back(name);
  }
  if (result.indexed) {
    json index = {{"metadata", {{"total_size", result.total_size}}}, {"weight_map", weight_map}};
    write_file_atomic(dir / kSafetensorsIndexName, index.dump(2) + "\n");
  }

  // Remove what an earlier save left behind so the directory describes one checkpoint.
  const std::set<std::string> written(result.files.begin(), result.files.end());
  std::vector<fs::path> stale;
  fs::directory_iterator listing(dir, error);
  ANVIL_CHECK(!error, "[safetensors] cannot list {}: {}", dir.string(), error.message());
  for (const fs::directory_entry& entry : listing) {
    const std::string name = entry.path().filename().string();
    const bool stale_shard = is_shard_name(name) && !written.count(name);
    const bool stale_single = result.indexed && name == kSafetensorsSingleName;
    const bool stale_index = !result.indexed && name == kSafetensorsIndexName;
    if (stale_shard || stale_single || stale_index) stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) {
    fs::remove(path, error);
    ANVIL_CHECK(!error, "[safetensors] cannot remove stale {}: {}", path.string(), error.message());
  }
  fsync_dir(dir);
  return result;
}

}  // namespace anvil
