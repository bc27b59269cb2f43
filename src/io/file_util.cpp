// POSIX implementation of the durable file helpers: write loops that survive EINTR and short
// writes, fsync before rename so a crash never exposes a partial file, and an mmap wrapper.
#include "io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <limits.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"

namespace anvil {
namespace {

std::string system_reason() { return std::strerror(errno); }

// Closes a descriptor on scope exit so every error path releases it.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

int open_or_throw(const std::filesystem::path& path, int flags, const char* purpose) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  ANVIL_CHECK(fd >= 0, "[io] cannot open {} for {}: {}", path.string(), purpose, system_reason());
  return fd;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path)
    : path_(std::move(path)), tmp_path_(path_.string() + ".tmp") {
  fd_ = open_or_throw(tmp_path_, O_WRONLY | O_CREAT | O_TRUNC, "writing");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  ANVIL_CHECK(fd_ >= 0 && !committed_, "[io] write to {} after commit", path_.string());
  const char* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, cursor, bytes);
    if (n < 0 && errno == EINTR) continue;
    ANVIL_CHECK(n > 0, "[io] cannot write {}: {}", tmp_path_.string(),
                n < 0 ? system_reason() : std::string("no progress"));
    cursor += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void AtomicFileWriter::commit() {
  ANVIL_CHECK(fd_ >= 0 && !committed_, "[io] {} committed twice", path_.string());
  ANVIL_CHECK(::fsync(fd_) == 0, "[io] cannot fsync {}: {}", tmp_path_.string(), system_reason());
  const int fd = fd_;
  fd_ = -1;
  ANVIL_CHECK(::close(fd) == 0, "[io] cannot close {}: {}", tmp_path_.string(), system_reason());
  ANVIL_CHECK(::rename(tmp_path_.c_str(), path_.c_str()) == 0, "[io] cannot rename {} to {}: {}",
              tmp_path_.string(), path_.string(), system_reason());
  committed_ = true;
  std::filesystem::path dir = path_.parent_path();
  fsync_dir(dir.empty() ? std::filesystem::path(".") : dir);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

std::string read_file(const std::filesystem::path& path) {
  const int fd = open_or_throw(path, O_RDONLY, "reading");
  FdCloser closer{fd};
  struct stat info;
  ANVIL_CHECK(::fstat(fd, &info) == 0, "[io] cannot stat {}: {}", path.string(), system_reason());
  ANVIL_CHECK(!S_ISDIR(info.st_mode), "[io] cannot read {}: it is a directory", path.string());
  std::string content;
  content.reserve(static_cast<size_t>(info.st_size));
  char block[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, block, sizeof(block));
    if (n < 0 && errno == EINTR) continue;
    ANVIL_CHECK(n >= 0, "[io] cannot read {}: {}", path.string(), system_reason());
    if (n == 0) break;
    content.append(block, static_cast<size_t>(n));
  }
  return content;
}

void fsync_dir(const std::filesystem::path& dir) {
  const int fd = open_or_throw(dir, O_RDONLY | O_DIRECTORY, "syncing");
  FdCloser closer{fd};
  ANVIL_CHECK(::fsync(fd) == 0, "[io] cannot fsync directory {}: {}", dir.string(),
              system_reason());
}

void fsync_file(const std::filesystem::path& path) {
  const int fd = open_or_throw(path, O_RDONLY, "syncing");
  FdCloser closer{fd};
  ANVIL_CHECK(::fsync(fd) == 0, "[io] cannot fsync {}: {}", path.string(), system_reason());
}

uint64_t xxhash64_file(const std::filesystem::path& path) {
  const int fd = open_or_throw(path, O_RDONLY, "hashing");
  FdCloser closer{fd};
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(),
                                                                     &XXH64_freeState);
  ANVIL_CHECK(state != nullptr, "[io] cannot allocate a hash state for {}", path.string());
  XXH64_reset(state.get(), 0);
  std::vector<char> block(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    ANVIL_CHECK(n >= 0, "[io] cannot read {}: {}", path.string(), system_reason());
    if (n == 0) break;
    XXH64_update(state.get(), block.data(), static_cast<size_t>(n));
  }
  return XXH64_digest(state.get());
}

std::string hash_hex(uint64_t hash) { return fmt::format("{:016x}", hash); }

MappedFile::MappedFile(const std::filesystem::path& path) {
  const int fd = open_or_throw(path, O_RDONLY, "reading");
  FdCloser closer{fd};
  struct stat info;
  ANVIL_CHECK(::fstat(fd, &info) == 0, "[io] cannot stat {}: {}", path.string(), system_reason());
  ANVIL_CHECK(S_ISREG(info.st_mode), "[io] cannot map {}: not a regular file", path.string());
  if (info.st_size == 0) return;
  void* mapped = ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ANVIL_CHECK(mapped != MAP_FAILED, "[io] cannot map {}: {}", path.string(), system_reason());
  data_ = static_cast<const uint8_t*>(mapped);
  size_ = static_cast<size_t>(info.st_size);
}

MappedFile::~MappedFile() { unmap(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace anvil
