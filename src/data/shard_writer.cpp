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

SpillFile::SpillFile(const std::string& path, const std::string& shard) : shard_(shard) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC, 0600);
  ANVIL_CHECK(fd_ >= 0, "[shard] {}: cannot create scratch file {}: {}", shard_, path,
              std::strerror(errno));
  ::unlink(path.c_str());
  buffer_.reserve(kWriteBufferBytes);
}

SpillFile::~SpillFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SpillFile::append(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  buffer_.insert(buffer_.end(), bytes, bytes + size);
  if (buffer_.size() >= kWriteBufferBytes) flush();
}

void SpillFile::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::pwrite(fd_, buffer_.data() + done, buffer_.size() - done,
                               static_cast<off_t>(written_ + done));
    if (n < 0 && errno == EINTR) continue;
    ANVIL_CHECK(n > 0, "[shard] {}: writing scratch data failed: {}", shard_,
                std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  written_ += buffer_.size();
  buffer_.clear();
}

size_t SpillFile::read_at(uint64_t offset, uint8_t* out, size_t size) {
  const size_t want = static_cast<size_t>(std::min<uint64_t>(size, written_ - offset));
  size_t done = 0;
  while (done < want) {
    const ssize_t n = ::pread(fd_, out + done, want - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    ANVIL_CHECK(n > 0, "[shard] {}: reading scratch data back failed: {}", shard_,
                n < 0 ? std::strerror(errno) : "the file is shorter than written");
    done += static_cast<size_t>(n);
  }
  return done;
}

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
  doc_offsets_ = std::make_unique<SpillFile>(temp_path_ + ".offsets", path_);
  if (options.with_loss_mask)
    loss_mask_ = std::make_unique<SpillFile>(temp_path_ + ".mask", path_);
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
  if (loss_mask_ != nullptr) loss_mask_->append(loss_mask.data(), loss_mask.size());
  uint8_t offset[8];
  for (int b = 0; b < 8; ++b) offset[b] = static_cast<uint8_t>(header_.token_count >> (8 * b));
  doc_offsets_->append(offset, sizeof(offset));
  header_.token_count += tokens.size();
  header_.document_count += 1;
}

void ShardWriter::finish() {
  ANVIL_CHECK(!finished_, "[shard] {}: finish called twice", path_);
  const uint64_t token_section = header_.token_count * header_.token_bytes;
  const std::array<uint8_t, 8> zeros{};
  write_bytes(zeros.data(), (8 - token_section % 8) % 8, true);
  const auto copy = [this](const uint8_t* block, size_t size) { write_bytes(block, size, true); };
  doc_offsets_->read_back(copy);
  if (loss_mask_ != nullptr) loss_mask_->read_back(copy);
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
