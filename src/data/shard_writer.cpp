// ShardWriter implementation: buffered POSIX writes, streaming xxhash64, temp file + rename.
#include "data/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace anvil {
namespace {

constexpr size_t kWriteBufferBytes = size_t{1} << 20;

}  // namespace

ShardWriter::ShardWriter(std::string path, const ShardWriterOptions& options)
    : path_(std::move(path)) {
  ANVIL_CHECK(options.vocab_size > 0, "[shard] {}: vocabulary size must be positive", path_);
  header_.token_bytes =
      options.token_bytes == 0 ? token_bytes_for_vocab(options.vocab_size) : options.token_bytes;
  ANVIL_CHECK(header_.token_bytes == 2 || header_.token_bytes == 4,
              "[shard] {}: token width must be 2 or 4 bytes, got {}", path_, header_.token_bytes);
  ANVIL_CHECK(header_.token_bytes == 4 || options.vocab_size <= 65536,
              "[shard] {}: vocabulary of {} does not fit 2-byte tokens", path_, options.vocab_size);
  ANVIL_CHECK(options.tokenizer_fingerprint.size() <= kShardFingerprintBytes,
              "[shard] {}: tokenizer fingerprint longer than {} characters", path_,
              kShardFingerprintBytes);
  header_.vocab_size = options.vocab_size;
  header_.flags = options.with_loss_mask ? kShardFlagLossMask : 0;
  header_.bos_id = options.bos_id;
  header_.eos_id = options.eos_id;
  header_.tokenizer_fingerprint = options.tokenizer_fingerprint;

  temp_path_ = path_ + ".tmp-" + std::to_string(getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ANVIL_CHECK(fd_ >= 0, "[shard] {}: cannot create file: {}", path_, std::strerror(errno));
  checksum_ = XXH64_createState();
  XXH64_reset(checksum_, 0);
  buffer_.reserve(kWriteBufferBytes);
  const std::array<uint8_t, kShardHeaderBytes> placeholder{};
  write_bytes(placeholder.data(), placeholder.size(), false);
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) std::remove(temp_path_.c_str());
  XXH64_freeState(checksum_);
}

void ShardWriter::write_bytes(const void* data, size_t size, bool checksummed) {
  if (checksummed) XXH64_update(checksum_, data, size);
  const auto* bytes = static_cast<const uint8_t*>(data);
  buffer_.insert(buffer_.end(), bytes, bytes + size);
  if (buffer_.size() >= kWriteBufferBytes) flush_buffer();
}

void ShardWriter::flush_buffer() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ANVIL_CHECK(n > 0, "[shard] {}: write failed: {}", path_, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
}

void ShardWriter::add_document(std::span<const int32_t> tokens,
                               std::span<const uint8_t> loss_mask) {
  ANVIL_CHECK(!finished_, "[shard] {}: add_document after finish", path_);
  ANVIL_CHECK(!tokens.empty(), "[shard] {}: a document needs at least one token", path_);
  if (header_.has_loss_mask()) {
    ANVIL_CHECK(loss_mask.size() == tokens.size(),
                "[shard] {}: loss mask has {} entries for {} tokens", path_, loss_mask.size(),
                tokens.size());
  } else {
    ANVIL_CHECK(loss_mask.empty(), "[shard] {}: loss mask given for a shard without one", path_);
  }
  uint8_t packed[4 * 1024];
  const size_t width = header_.token_bytes;
  const size_t per_block = sizeof(packed) / width;
  for (size_t begin = 0; begin < tokens.size(); begin += per_block) {
    const size_t count = std::min(per_block, tokens.size() - begin);
    for (size_t i = 0; i < count; ++i) {
      const int32_t id = tokens[begin + i];
      ANVIL_CHECK(id >= 0 && static_cast<uint32_t>(id) < header_.vocab_size,
                  "[shard] {}: token id {} outside the vocabulary of {}", path_, id,
                  header_.vocab_size);
      const auto value = static_cast<uint32_t>(id);
      for (size_t b = 0; b < width; ++b)
        packed[i * width + b] = static_cast<uint8_t>(value >> (8 * b));
    }
    write_bytes(packed, count * width, true);
  }
  for (uint8_t m : loss_mask)
    ANVIL_CHECK(m <= 1, "[shard] {}: loss mask values must be 0 or 1, got {}", path_, m);
  loss_mask_.insert(loss_mask_.end(), loss_mask.begin(), loss_mask.end());
  doc_offsets_.push_back(header_.token_count);
  header_.token_count += tokens.size();
  header_.document_count += 1;
}

void ShardWriter::finish() {
  ANVIL_CHECK(!finished_, "[shard] {}: finish called twice", path_);
  const uint64_t token_section = header_.token_count * header_.token_bytes;
  const std::array<uint8_t, 8> zeros{};
  write_bytes(zeros.data(), (8 - token_section % 8) % 8, true);
  for (uint64_t offset : doc_offsets_) {
    uint8_t le[8];
    for (int b = 0; b < 8; ++b) le[b] = static_cast<uint8_t>(offset >> (8 * b));
    write_bytes(le, sizeof(le), true);
  }
  if (header_.has_loss_mask()) write_bytes(loss_mask_.data(), loss_mask_.size(), true);
  flush_buffer();
  header_.payload_checksum = XXH64_digest(checksum_);
  const auto header_bytes = encode_shard_header(header_);
  ANVIL_CHECK(::pwrite(fd_, header_bytes.data(), header_bytes.size(), 0) ==
                  static_cast<ssize_t>(header_bytes.size()),
              "[shard] {}: writing the header failed: {}", path_, std::strerror(errno));
  ANVIL_CHECK(::fsync(fd_) == 0, "[shard] {}: fsync failed: {}", path_, std::strerror(errno));
  const int close_result = ::close(fd_);
  fd_ = -1;
  ANVIL_CHECK(close_result == 0, "[shard] {}: close failed: {}", path_, std::strerror(errno));
  ANVIL_CHECK(std::rename(temp_path_.c_str(), path_.c_str()) == 0,
              "[shard] {}: cannot rename the finished file into place: {}", path_,
              std::strerror(errno));
  finished_ = true;
}

}  // namespace anvil
