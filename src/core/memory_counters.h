// MemoryCounters: the bytes one allocator holds, by MemoryCategory (core/memory_category.h):
// current and peak per category, and the current and peak total. The total's peak is the most
// held at once, tracked on its own: categories peak at different moments (activations in the
// forward pass, gather slots in backward), so it is usually less than the sum of their peaks.
// Lock-free (relaxed atomics; a peak is raised by compare-exchange), so any thread may
// allocate. A snapshot reads each value exactly but not all at one instant while other
// threads allocate.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "core/memory_category.h"

namespace anvil {

// What an allocator holds now and has held at most, in bytes.
struct MemorySnapshot {
  MemoryByCategory current{};  // by category, indexed by static_cast<int>(MemoryCategory)
  MemoryByCategory peak{};     // each category's own peak
  int64_t total = 0;           // the sum of current
  int64_t total_peak = 0;      // the most bytes held at once (at most the sum of peak)

  int64_t current_of(MemoryCategory category) const {
    return current[static_cast<size_t>(category)];
  }
  int64_t peak_of(MemoryCategory category) const { return peak[static_cast<size_t>(category)]; }
};

class MemoryCounters {
 public:
  // Counts `bytes` more held under `category`, raising the peaks.
  void add(MemoryCategory category, int64_t bytes);
  // Counts `bytes` under `category` as released.
  void subtract(MemoryCategory category, int64_t bytes);
  // Returns the current values.
  MemorySnapshot snapshot() const;
  // Restarts every peak from the bytes held now.
  void reset_peaks();

 private:
  std::array<std::atomic<int64_t>, kMemoryCategoryCount> current_{};
  std::array<std::atomic<int64_t>, kMemoryCategoryCount> peak_{};
  std::atomic<int64_t> total_{0};
  std::atomic<int64_t> total_peak_{0};
};

}  // namespace anvil
