// ShardReader implementation: mmap, then validate in order of cost (header, length, payload
// checksum, offsets) so a truncated file is reported as such before any hashing happens.
#include "data/shard_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace anvil {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian and read in place");

ShardReader::ShardReader(const std::string& path, bool verify_payload) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_CHECK(fd >= 0, "[shard] {}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  const int stat_result = ::fstat(fd, &st);
  if (stat_result != 0 || static_cast<size_t>(st.st_size) < kShardHeaderBytes) {
    ::close(fd);
    ANVIL_CHECK(stat_result == 0, "[shard] {}: cannot stat: {}", path, std::strerror(errno));
    ANVIL_FAIL("[shard] {}: file is {} bytes, shorter than the {}-byte header (truncated)", path,
               st.st_size, kShardHeaderBytes);
  }
  mapped_bytes_ = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, mapped_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  ANVIL_CHECK(map != MAP_FAILED, "[shard] {}: mmap failed: {}", path, std::strerror(map_errno));
  base_ = static_cast<const uint8_t*>(map);
  try {
    header_ = decode_shard_header(base_, path);
    ANVIL_CHECK(header_.file_bytes() == mapped_bytes_,
                "[shard] {}: file is {} bytes but its header describes {} (file corrupt or "
                "truncated)",
                path, mapped_bytes_, header_.file_bytes());
    if (verify_payload) {
      const uint64_t sum = XXH64(base_ + kShardHeaderBytes, mapped_bytes_ - kShardHeaderBytes, 0);
      ANVIL_CHECK(sum == header_.payload_checksum,
                  "[shard] {}: payload checksum mismatch (file corrupt or truncated)", path);
    }
    const auto offsets = doc_offsets();
    ANVIL_CHECK(offsets.empty() == (header_.token_count == 0),
                "[shard] {}: {} documents for {} tokens (corrupt document table)", path,
                offsets.size(), header_.token_count);
    for (size_t d = 0; d < offsets.size(); ++d) {
      const bool ordered = d == 0 ? offsets[d] == 0 : offsets[d] > offsets[d - 1];
      ANVIL_CHECK(ordered && offsets[d] < header_.token_count,
                  "[shard] {}: document {} starts at token {}, out of order or past the end "
                  "(corrupt document table)",
                  path, d, offsets[d]);
    }
  } catch (...) {
    release();
    throw;
  }
}

ShardReader::~ShardReader() { release(); }

ShardReader::ShardReader(ShardReader&& other) noexcept
    : path_(std::move(other.path_)),
      header_(std::move(other.header_)),
      base_(std::exchange(other.base_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

ShardReader& ShardReader::operator=(ShardReader&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    header_ = std::move(other.header_);
    base_ = std::exchange(other.base_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

void ShardReader::release() {
  if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), mapped_bytes_);
  base_ = nullptr;
  mapped_bytes_ = 0;
}

int32_t ShardReader::token(uint64_t i) const {
  int32_t value;
  read_tokens(i, 1, &value);
  return value;
}

void ShardReader::read_tokens(uint64_t begin, uint64_t count, int32_t* out) const {
  ANVIL_CHECK(begin <= header_.token_count && count <= header_.token_count - begin,
              "[shard] {}: token range [{}, {}) outside the {} tokens", path_, begin, begin + count,
              header_.token_count);
  const uint8_t* tokens = base_ + header_.tokens_offset();
  if (header_.token_bytes == 2) {
    const auto* src = reinterpret_cast<const uint16_t*>(tokens) + begin;
    for (uint64_t i = 0; i < count; ++i) out[i] = src[i];
  } else {
    const auto* src = reinterpret_cast<const uint32_t*>(tokens) + begin;
    for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(src[i]);
  }
}

std::span<const uint64_t> ShardReader::doc_offsets() const {
  const auto* first = reinterpret_cast<const uint64_t*>(base_ + header_.doc_offsets_offset());
  return {first, static_cast<size_t>(header_.document_count)};
}

std::span<const uint8_t> ShardReader::loss_mask() const {
  if (!header_.has_loss_mask()) return {};
  return {base_ + header_.loss_mask_offset(), static_cast<size_t>(header_.token_count)};
}

}  // namespace anvil
