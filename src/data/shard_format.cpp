// Header encoding and validation for token shards. Fields are packed byte by byte in
// little-endian order so the format does not depend on the host's struct layout or endianness.
#include "data/shard_format.h"

#include <xxhash.h>

#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace anvil {
namespace {

// Byte positions inside the 128-byte header (docs/formats.md lists the same table).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffTokenBytes = 12;
constexpr size_t kOffFlags = 16;
constexpr size_t kOffVocabSize = 20;
constexpr size_t kOffTokenCount = 24;
constexpr size_t kOffDocumentCount = 32;
constexpr size_t kOffBosId = 40;
constexpr size_t kOffEosId = 44;
constexpr size_t kOffPayloadChecksum = 48;
constexpr size_t kOffFingerprint = 56;
constexpr size_t kOffHeaderChecksum = 120;  // 88..119 are reserved and written as zero

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

uint64_t ShardHeader::doc_offsets_offset() const {
  const uint64_t token_section = token_count * token_bytes;
  return kShardHeaderBytes + (token_section + 7) / 8 * 8;
}

uint64_t ShardHeader::file_bytes() const {
  return loss_mask_offset() + (has_loss_mask() ? token_count : 0);
}

std::array<uint8_t, kShardHeaderBytes> encode_shard_header(const ShardHeader& header) {
  ANVIL_CHECK(header.tokenizer_fingerprint.size() <= kShardFingerprintBytes,
              "[shard] tokenizer fingerprint '{}' is longer than {} characters",
              header.tokenizer_fingerprint, kShardFingerprintBytes);
  std::array<uint8_t, kShardHeaderBytes> bytes{};
  std::memcpy(bytes.data() + kOffMagic, kShardMagic.data(), kShardMagic.size());
  put_u32(bytes.data() + kOffVersion, header.version);
  put_u32(bytes.data() + kOffTokenBytes, header.token_bytes);
  put_u32(bytes.data() + kOffFlags, header.flags);
  put_u32(bytes.data() + kOffVocabSize, header.vocab_size);
  put_u64(bytes.data() + kOffTokenCount, header.token_count);
  put_u64(bytes.data() + kOffDocumentCount, header.document_count);
  put_u32(bytes.data() + kOffBosId, static_cast<uint32_t>(header.bos_id));
  put_u32(bytes.data() + kOffEosId, static_cast<uint32_t>(header.eos_id));
  put_u64(bytes.data() + kOffPayloadChecksum, header.payload_checksum);
  std::memcpy(bytes.data() + kOffFingerprint, header.tokenizer_fingerprint.data(),
              header.tokenizer_fingerprint.size());
  put_u64(bytes.data() + kOffHeaderChecksum, XXH64(bytes.data(), kOffHeaderChecksum, 0));
  return bytes;
}

ShardHeader decode_shard_header(const uint8_t* bytes, const std::string& path) {
  ANVIL_CHECK(std::memcmp(bytes + kOffMagic, kShardMagic.data(), kShardMagic.size()) == 0,
              "[shard] {}: not an anvil token shard (bad magic bytes)", path);
  ANVIL_CHECK(XXH64(bytes, kOffHeaderChecksum, 0) == get_u64(bytes + kOffHeaderChecksum),
              "[shard] {}: header checksum mismatch (file corrupt)", path);
  ShardHeader h;
  h.version = get_u32(bytes + kOffVersion);
  ANVIL_CHECK(h.version == kShardVersion,
              "[shard] {}: unsupported shard version {} (this build reads version {})", path,
              h.version, kShardVersion);
  h.token_bytes = get_u32(bytes + kOffTokenBytes);
  ANVIL_CHECK(h.token_bytes == 2 || h.token_bytes == 4,
              "[shard] {}: token width {} bytes is invalid (must be 2 or 4)", path, h.token_bytes);
  h.flags = get_u32(bytes + kOffFlags);
  ANVIL_CHECK((h.flags & ~kShardFlagLossMask) == 0,
              "[shard] {}: unknown header flags 0x{:x} (written by a newer anvil?)", path, h.flags);
  h.vocab_size = get_u32(bytes + kOffVocabSize);
  ANVIL_CHECK(h.vocab_size > 0, "[shard] {}: vocabulary size is 0", path);
  ANVIL_CHECK(h.token_bytes == 4 || h.vocab_size <= 65536,
              "[shard] {}: vocabulary of {} does not fit 2-byte tokens", path, h.vocab_size);
  h.token_count = get_u64(bytes + kOffTokenCount);
  h.document_count = get_u64(bytes + kOffDocumentCount);
  // Bounds that keep the size arithmetic below from overflowing (2^56 bytes is far beyond disks).
  ANVIL_CHECK(h.token_count < (uint64_t{1} << 56) && h.document_count < (uint64_t{1} << 56),
              "[shard] {}: implausible token or document count in header", path);
  h.bos_id = static_cast<int32_t>(get_u32(bytes + kOffBosId));
  h.eos_id = static_cast<int32_t>(get_u32(bytes + kOffEosId));
  h.payload_checksum = get_u64(bytes + kOffPayloadChecksum);
  const char* fp = reinterpret_cast<const char*>(bytes + kOffFingerprint);
  h.tokenizer_fingerprint.assign(fp, strnlen(fp, kShardFingerprintBytes));
  return h;
}

std::string shard_file_name(std::string_view split, int part) {
  return fmt::format("{}-{:05d}.tok", split, part);
}

}  // namespace anvil
