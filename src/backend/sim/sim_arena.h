// The simulated device's memory: one memfd of `capacity` bytes mapped twice. The device view,
// whose addresses tensors carry, is PROT_NONE, so any host dereference of a device pointer
// faults as it would on a discrete accelerator; the kernel view maps the same pages read/write
// at the same offsets, and only the simulator's stream touches it (kernel_address translates).
// Allocation is first-fit over 256-byte granules with neighbour coalescing; exceeding the
// capacity throws "[sim] out of device memory ...", as a real device's allocator does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace anvil::sim {

// Returns the byte count of a size such as "512MiB", "2GiB" or "1048576"; throws naming
// `what` (e.g. "ANVIL_SIM_MEMORY") for anything else.
size_t parse_byte_size(const std::string& text, const char* what);

class SimArena {
 public:
  explicit SimArena(size_t capacity);
  ~SimArena();
  SimArena(const SimArena&) = delete;
  SimArena& operator=(const SimArena&) = delete;

  // Returns a device-view address of at least `bytes` bytes, 256-byte aligned.
  void* allocate(size_t bytes);
  void deallocate(void* ptr);
  // Returns the kernel-view address of a device-view address inside the arena (null stays
  // null); throws for an address outside it.
  void* kernel_address(const void* device_ptr) const;
  // The inverse: the device-view address of a kernel-view address inside the arena.
  void* device_address(const void* kernel_ptr) const;

  size_t capacity() const { return capacity_; }
  size_t bytes_in_use() const;
  size_t peak_bytes_in_use() const;

 private:
  int fd_ = -1;
  char* device_view_ = nullptr;
  char* kernel_view_ = nullptr;
  size_t capacity_ = 0;
  mutable std::mutex mutex_;
  std::map<size_t, size_t> free_;  // offset -> size of each free range
  std::map<size_t, size_t> used_;  // offset -> size of each allocation
  size_t in_use_ = 0;
  size_t peak_ = 0;
};

}  // namespace anvil::sim
