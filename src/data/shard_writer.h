// ShardWriter: streams documents into one token shard file. Tokens go to "<path>.tmp-<pid>"
// as they arrive (with a running payload checksum); finish() appends the document offsets and
// the optional loss mask, writes the header, fsyncs and renames onto <path>. A writer that is
// destroyed without finish() (an error anywhere) deletes its temp file, so a shard path either
// holds a complete, checksummed file or nothing. The document offsets and the loss mask, which
// follow the tokens in the file but arrive with them, are spilled to unlinked scratch files
// beside it until finish(): memory stays one write buffer each, however large the part.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/shard_format.h"

namespace anvil {

struct ShardWriterOptions {
  uint32_t vocab_size = 0;
  uint32_t token_bytes = 0;  // 0: choose from vocab_size (token_bytes_for_vocab)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  std::string tokenizer_fingerprint;
  bool with_loss_mask = false;  // SFT shards: every document carries a per-token mask
};

// Bytes appended now and read back once, in order: an unlinked file beside the shard (so
// nothing is left behind, whatever happens) behind a write buffer.
class SpillFile {
 public:
  // Creates the file at `path` and unlinks it at once; throws naming `shard` when it cannot.
  SpillFile(const std::string& path, const std::string& shard);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  void append(const void* data, size_t size);
  // Calls `consume(block, size)` on every byte appended, in order, in blocks.
  template <typename Consume>
  void read_back(Consume&& consume);

 private:
  void flush();
  // Reads up to `size` bytes at `offset` into `out`; returns the count.
  size_t read_at(uint64_t offset, uint8_t* out, size_t size);

  std::string shard_;
  int fd_ = -1;
  uint64_t written_ = 0;
  std::vector<uint8_t> buffer_;
};

template <typename Consume>
void SpillFile::read_back(Consume&& consume) {
  flush();
  std::vector<uint8_t> block(size_t{1} << 20);
  for (uint64_t offset = 0; offset < written_;) {
    const size_t got = read_at(offset, block.data(), block.size());
    consume(block.data(), got);
    offset += got;
  }
}

class ShardWriter {
 public:
  // Creates the temp file next to `path`; throws naming the path when it cannot.
  ShardWriter(std::string path, const ShardWriterOptions& options);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one document (at least one token, each below vocab_size). `loss_mask` must hold
  // one 0/1 byte per token when the shard has a mask and be empty otherwise.
  void add_document(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask = {});
  // Completes the file and renames it into place; the writer accepts nothing afterwards.
  void finish();

  uint64_t token_count() const { return header_.token_count; }
  uint64_t document_count() const { return header_.document_count; }
  const std::string& path() const { return path_; }

 private:
  void write_bytes(const void* data, size_t size, bool checksummed);
  void flush_buffer();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool finished_ = false;
  ShardHeader header_;
  XXH64_state_t* checksum_ = nullptr;
  std::vector<uint8_t> buffer_;
  std::unique_ptr<SpillFile> doc_offsets_;  // 8 little-endian bytes per document
  std::unique_ptr<SpillFile> loss_mask_;    // one byte per token (shards with a mask)
};

}  // namespace anvil
