// Hugging Face checkpoints as one set of tensors: a single `model.safetensors`, or shards
// `model-00001-of-0000N.safetensors` listed by `model.safetensors.index.json`
// ({"metadata": {"total_size": N}, "weight_map": {tensor: file}}). Reading checks that the index
// and the shards agree exactly (every listed tensor is in its shard, no shard holds an unlisted
// tensor, no name appears twice). Writing follows Hugging Face: tensors go to shards in the
// order they were added, a new shard starts when the next tensor would pass the size limit, and
// a tensor larger than the limit gets a shard of its own; a model that fits in one shard is
// written as a plain model.safetensors without an index.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace anvil {

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr std::string_view kSafetensorsSingleName = "model.safetensors";

class SafetensorsCollection {
 public:
  // Opens a directory (its index when present, else its model.safetensors) or one
  // .safetensors file; throws naming the index or file and the tensor on any inconsistency.
  static SafetensorsCollection open(const std::filesystem::path& path);

  // Returns the index file, or the single safetensors file, the tensors were read from.
  const std::filesystem::path& source() const { return source_; }
  // Returns all tensor names in sorted order.
  std::vector<std::string> names() const;
  size_t size() const { return entries_.size(); }
  // Returns the entry called `name`, or nullptr.
  const SafetensorsEntry* find(std::string_view name) const;
  // Returns the entry called `name`; throws naming the source and the tensor when absent.
  const SafetensorsEntry& at(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // Returns the opened files (one, or every shard in name order).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // Returns the index's "metadata" object (an empty object for a single file).
  const nlohmann::json& index_metadata() const { return index_metadata_; }

 private:
  std::filesystem::path source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsEntry*, std::less<>> entries_;
  nlohmann::json index_metadata_ = nlohmann::json::object();
};

struct ShardedWriteResult {
  std::vector<std::string> files;  // file names written, in shard order
  bool indexed = false;            // whether an index file was written
  uint64_t total_size = 0;         // sum of tensor bytes (the index's total_size)
};

// Writes the writer's tensors (and its metadata, in every shard) into `dir`, sharded so no
// shard's tensor bytes exceed `max_shard_bytes` unless one tensor alone does. Shards and then
// the index are each written atomically; stale shards or index of an earlier save with the same
// naming are removed afterwards so the directory holds exactly one consistent checkpoint.
ShardedWriteResult write_safetensors_sharded(const SafetensorsWriter& tensors,
                                             const std::filesystem::path& dir,
                                             uint64_t max_shard_bytes);

}  // namespace anvil
