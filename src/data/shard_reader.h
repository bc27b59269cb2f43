// ShardReader: maps one token shard read-only and validates it before anything is read:
// magic, version, header checksum, file length against the header's counts, payload checksum
// (xxhash64 of everything after the header) and document offsets (0 first, strictly
// increasing, inside the tokens). Each failure is one error line naming the file. After the
// constructor returns, every accessor is a bounds-checked read of memory known to be intact.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/shard_format.h"

namespace anvil {

class ShardReader {
 public:
  // Maps and validates `path`; verify_payload=false skips only the payload checksum pass.
  explicit ShardReader(const std::string& path, bool verify_payload = true);
  ~ShardReader();
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  uint64_t token_count() const { return header_.token_count; }
  uint64_t document_count() const { return header_.document_count; }
  bool has_loss_mask() const { return header_.has_loss_mask(); }

  // Returns token i.
  int32_t token(uint64_t i) const;
  // Copies tokens [begin, begin + count) into `out` as int32.
  void read_tokens(uint64_t begin, uint64_t count, int32_t* out) const;
  // Returns the start offset (token index) of every document.
  std::span<const uint64_t> doc_offsets() const;
  // Returns the per-token loss mask (0/1); empty when the shard has none.
  std::span<const uint8_t> loss_mask() const;

 private:
  void release();

  std::string path_;
  ShardHeader header_;
  const uint8_t* base_ = nullptr;
  size_t mapped_bytes_ = 0;
};

}  // namespace anvil
