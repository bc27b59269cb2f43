// The token shard file format (docs/formats.md, "Token shards", is the byte-by-byte spec).
// A shard is a 128-byte little-endian header, then the tokens (2 or 4 bytes each), zero padding
// to a multiple of 8, the u64 start offset of every document, and, when the loss-mask flag is
// set, one u8 per token. The section offsets are not stored: they follow from the counts, so a
// header and a file length either agree exactly or the file is rejected.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace anvil {

inline constexpr std::array<char, 8> kShardMagic = {'A', 'N', 'V', 'T', 'O', 'K', '\0', '\x1a'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 128;
inline constexpr size_t kShardFingerprintBytes = 32;
// Header flag bit 0: a per-token u8 loss-mask section follows the document offsets (SFT).
inline constexpr uint32_t kShardFlagLossMask = 1u << 0;
// Shard parts are cut at document boundaries once they hold this many tokens (2^28).
inline constexpr uint64_t kDefaultPartTokens = uint64_t{1} << 28;

// The decoded header. Ids absent from the tokenizer are stored as -1.
struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;  // 2 (u16 tokens) or 4 (u32 tokens)
  uint32_t flags = 0;
  uint32_t vocab_size = 0;
  uint64_t token_count = 0;
  uint64_t document_count = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  uint64_t payload_checksum = 0;      // xxhash64 (seed 0) of every byte after the header
  std::string tokenizer_fingerprint;  // at most 32 ASCII characters

  bool has_loss_mask() const { return (flags & kShardFlagLossMask) != 0; }
  // Returns the byte offset of the token section.
  uint64_t tokens_offset() const { return kShardHeaderBytes; }
  // Returns the byte offset of the document-offset section (tokens padded to 8 bytes).
  uint64_t doc_offsets_offset() const;
  // Returns the byte offset of the loss-mask section (meaningful only with the flag).
  uint64_t loss_mask_offset() const { return doc_offsets_offset() + 8 * document_count; }
  // Returns the total file length the header implies.
  uint64_t file_bytes() const;
};

// Returns the token width for a vocabulary: 2 bytes when every id fits in u16, else 4.
constexpr uint32_t token_bytes_for_vocab(uint64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

// Serialises a header to its 128 bytes, computing the header checksum.
std::array<uint8_t, kShardHeaderBytes> encode_shard_header(const ShardHeader& header);
// Parses and validates 128 header bytes (magic, version, checksum, field ranges); `path` names
// the file in error messages.
ShardHeader decode_shard_header(const uint8_t* bytes, const std::string& path);

// Returns the shard file name of a split part: "train-00000.tok".
std::string shard_file_name(std::string_view split, int part);

}  // namespace anvil
