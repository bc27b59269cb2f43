// MemoryCounters (see memory_counters.h).
#include "core/memory_counters.h"

namespace anvil {
namespace {

// Raises `peak` to `value` unless it is already at least that.
void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (seen < value && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

void MemoryCounters::add(MemoryCategory category, int64_t bytes) {
  const size_t c = static_cast<size_t>(category);
  raise_to(peak_[c], current_[c].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_to(total_peak_, total_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemoryCounters::subtract(MemoryCategory category, int64_t bytes) {
  current_[static_cast<size_t>(category)].fetch_sub(bytes, std::memory_order_relaxed);
  total_.fetch_sub(bytes, std::memory_order_relaxed);
}

MemorySnapshot MemoryCounters::snapshot() const {
  MemorySnapshot s;
  for (size_t c = 0; c < current_.size(); ++c) {
    s.current[c] = current_[c].load(std::memory_order_relaxed);
    s.peak[c] = peak_[c].load(std::memory_order_relaxed);
  }
  s.total = total_.load(std::memory_order_relaxed);
  s.total_peak = total_peak_.load(std::memory_order_relaxed);
  return s;
}

void MemoryCounters::reset_peaks() {
  for (size_t c = 0; c < current_.size(); ++c)
    peak_[c].store(current_[c].load(std::memory_order_relaxed), std::memory_order_relaxed);
  total_peak_.store(total_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace anvil
