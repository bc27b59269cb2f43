// SimArena (see sim_arena.h).
#include "backend/sim/sim_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace anvil::sim {
namespace {

constexpr size_t kGranule = 256;

}  // namespace

size_t parse_byte_size(const std::string& text, const char* what) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string unit = text.substr(digits);
  size_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = size_t{1} << 10;
  else if (unit == "MiB") scale = size_t{1} << 20;
  else if (unit == "GiB") scale = size_t{1} << 30;
  else if (unit == "TiB") scale = size_t{1} << 40;
  ANVIL_CHECK(digits > 0 && digits <= 12 && scale != 0,
              "[sim] {} must be a size like 512MiB or 2GiB (units B, KiB, MiB, GiB, TiB), got '{}'",
              what, text);
  const size_t bytes = std::stoull(text.substr(0, digits)) * scale;
  ANVIL_CHECK(bytes > 0, "[sim] {} must be more than 0 bytes, got '{}'", what, text);
  return bytes;
}

SimArena::SimArena(size_t capacity) : capacity_((capacity + kGranule - 1) / kGranule * kGranule) {
  fd_ = memfd_create("anvil-sim-device", MFD_CLOEXEC);
  ANVIL_CHECK(fd_ >= 0, "[sim] memfd_create failed: {}", std::strerror(errno));
  if (ftruncate(fd_, static_cast<off_t>(capacity_)) != 0) {
    const int error = errno;
    close(fd_);
    ANVIL_FAIL("[sim] cannot size the {}-byte device arena: {}", capacity_, std::strerror(error));
  }
  void* device = mmap(nullptr, capacity_, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  void* kernel = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                      fd_, 0);
  if (device == MAP_FAILED || kernel == MAP_FAILED) {
    const int error = errno;
    if (device != MAP_FAILED) munmap(device, capacity_);
    if (kernel != MAP_FAILED) munmap(kernel, capacity_);
    close(fd_);
    ANVIL_FAIL("[sim] cannot map the {}-byte device arena: {}", capacity_, std::strerror(error));
  }
  device_view_ = static_cast<char*>(device);
  kernel_view_ = static_cast<char*>(kernel);
  free_[0] = capacity_;
}

SimArena::~SimArena() {
  munmap(device_view_, capacity_);
  munmap(kernel_view_, capacity_);
  close(fd_);
}

void* SimArena::allocate(size_t bytes) {
  const size_t size = std::max<size_t>(kGranule, (bytes + kGranule - 1) / kGranule * kGranule);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const size_t offset = it->first, left = it->second - size;
    free_.erase(it);
    if (left > 0) free_[offset + size] = left;
    used_[offset] = size;
    in_use_ += size;
    peak_ = std::max(peak_, in_use_);
    return device_view_ + offset;
  }
  ANVIL_FAIL("[sim] out of device memory allocating {} bytes ({} of {} in use)", bytes, in_use_,
             capacity_);
}

void SimArena::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t offset = static_cast<size_t>(static_cast<char*>(ptr) - device_view_);
  const auto used = used_.find(offset);
  ANVIL_CHECK(used != used_.end(), "[sim] freeing {} that the arena did not hand out", ptr);
  size_t begin = offset, size = used->second;
  in_use_ -= size;
  used_.erase(used);
  // Coalesce with the free neighbours so large blocks come back.
  auto next = free_.lower_bound(begin);
  if (next != free_.end() && next->first == begin + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[begin] = size;
}

void* SimArena::kernel_address(const void* device_ptr) const {
  if (device_ptr == nullptr) return nullptr;
  const char* p = static_cast<const char*>(device_ptr);
  ANVIL_CHECK(p >= device_view_ && p <= device_view_ + capacity_,
              "[sim] {} is not an address in the simulated device's memory", device_ptr);
  return kernel_view_ + (p - device_view_);
}

void* SimArena::device_address(const void* kernel_ptr) const {
  if (kernel_ptr == nullptr) return nullptr;
  const char* p = static_cast<const char*>(kernel_ptr);
  ANVIL_CHECK(p >= kernel_view_ && p <= kernel_view_ + capacity_,
              "[sim] {} is not a kernel-view address of the simulated device", kernel_ptr);
  return device_view_ + (p - kernel_view_);
}

size_t SimArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

size_t SimArena::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

}  // namespace anvil::sim
