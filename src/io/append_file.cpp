// AppendFile: O_APPEND writes that survive EINTR and short writes, and ftruncate(2) back to the
// last whole record when a write fails part-way.
#include "io/append_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace anvil {

AppendFile::AppendFile(std::filesystem::path path, std::string component)
    : path_(std::move(path)), component_(std::move(component)) {
  do {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  } while (fd_ < 0 && errno == EINTR);
  ANVIL_CHECK(fd_ >= 0, "{} cannot open {} for appending: {}", component_, path_.string(),
              std::strerror(errno));
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    ANVIL_FAIL("{} cannot read the size of {}: {}", component_, path_.string(), reason);
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view record) {
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : std::string("no progress");
      // A torn record would make the file unreadable from there on; drop it.
      if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
        ANVIL_FAIL("{} cannot write {}: {} (and cannot cut the torn record off: {})",
                   component_, path_.string(), reason, std::strerror(errno));
      }
      ANVIL_FAIL("{} cannot write {}: {}", component_, path_.string(), reason);
    }
    done += static_cast<size_t>(n);
  }
  size_ += record.size();
}

}  // namespace anvil
