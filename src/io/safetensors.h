// safetensors files: a zero-copy reader (the whole file is mmapped read-only and validated
// before any tensor is handed out) and a writer that produces exactly what the reference
// library writes for the same tensors: tensors sorted by descending dtype alignment then name,
// the JSON header padded with spaces to a multiple of 8 so every tensor is naturally aligned
// when mapped, and the file written through `<path>.tmp` + fsync + rename so a failed write
// never leaves a partial file. Sharded checkpoints live in safetensors_collection.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "io/file_util.h"
#include "io/safetensors_header.h"

namespace anvil {

// A validated, memory-mapped safetensors file. Entries (and views made from them) point into
// the mapping and stay valid while this object lives; moving it keeps them valid.
class SafetensorsFile {
 public:
  // Maps and validates `path`; throws anvil::Error naming the file (and tensor) on any problem.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  // Returns the tensors in file (byte offset) order.
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  // Returns the "__metadata__" map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // Returns the entry called `name`, or nullptr.
  const SafetensorsEntry* find(std::string_view name) const;
  // Returns the entry called `name`; throws naming the file and the tensor when absent.
  const SafetensorsEntry& at(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // Returns where the data area starts in the file (8 + header length).
  uint64_t data_offset() const { return header_.data_offset; }

 private:
  std::filesystem::path path_;
  MappedFile mapping_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Collects tensors and metadata, then writes one safetensors file. Added tensors are not
// copied (except through add_copy): their memory must stay valid until write() returns.
class SafetensorsWriter {
 public:
  struct PendingTensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes = 0;
    const uint8_t* external = nullptr;
    std::vector<uint8_t> owned;

    const uint8_t* bytes() const { return external ? external : owned.data(); }
  };

  // Adds a tensor from raw little-endian bytes whose size must be numel * dtype size.
  void add(std::string name, std::string_view dtype, std::vector<int64_t> shape,
           const void* data, uint64_t nbytes);
  // Adds a host tensor; its anvil dtype is stored under the safetensors name (f32 -> F32...).
  void add(std::string name, const Tensor& tensor);
  // Adds a tensor whose bytes are copied now (for small state assembled on the fly).
  void add_copy(std::string name, std::string_view dtype, std::vector<int64_t> shape,
                std::span<const uint8_t> bytes);
  // Sets one "__metadata__" entry (keys are written in sorted order).
  void set_metadata(std::string key, std::string value);

  // Returns the length prefix, the JSON header and its padding, exactly as written.
  std::string serialize_header() const;
  // Returns the size the file will have.
  uint64_t file_size() const;
  // Writes the file atomically (temporary, fsync, rename, fsync of the directory).
  void write(const std::filesystem::path& path) const;

  // Returns the tensors in the order they were added.
  const std::vector<PendingTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void add_pending(PendingTensor tensor);
  // Returns tensor indices in file order: descending dtype rank, then name.
  std::vector<size_t> file_order() const;

  std::vector<PendingTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, size_t, std::less<>> names_;
};

}  // namespace anvil
