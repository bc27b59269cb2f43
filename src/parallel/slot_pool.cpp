// Slot bookkeeping (see slot_pool.h). Eviction prefers slots whose content is least recently
// taken, so a just-gathered group survives until the pass has moved on.
#include "parallel/slot_pool.h"

#include "core/error.h"

namespace anvil {

SlotPool::SlotPool(Backend& backend, int count, size_t bytes) {
  slots_.resize(static_cast<size_t>(count));
  for (Slot& slot : slots_) slot.buffer = Buffer(backend, bytes, MemoryCategory::communication);
}

Tensor buffer_view(const Buffer& buffer, DType dtype, size_t byte_offset, int64_t elements) {
  const size_t end = byte_offset + static_cast<size_t>(elements) * dtype_size(dtype);
  ANVIL_CHECK(end <= buffer.bytes(), "[parallel] a buffer of {} bytes cannot hold {} bytes at {}",
              buffer.bytes(), end - byte_offset, byte_offset);
  const int64_t offset = static_cast<int64_t>(byte_offset / dtype_size(dtype));
  return buffer.as(dtype, Shape{static_cast<int64_t>(buffer.bytes() / dtype_size(dtype))})
      .flat(offset, elements);
}

int SlotPool::find(int group) const {
  for (int s = 0; s < count(); ++s)
    if (slots_[static_cast<size_t>(s)].group == group) return s;
  return -1;
}

int SlotPool::pick(bool allow_waiting) {
  int best = -1;
  for (int s = 0; s < count(); ++s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.in_use || !slot.pending.empty()) continue;
    if (best < 0 || slot.last_taken < slots_[static_cast<size_t>(best)].last_taken) best = s;
  }
  if (best >= 0 || !allow_waiting) return best;
  int oldest = -1;
  for (int s = 0; s < count(); ++s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.in_use) continue;
    if (oldest < 0 || slot.pending_order < slots_[static_cast<size_t>(oldest)].pending_order)
      oldest = s;
  }
  if (oldest >= 0) wait(oldest);
  return oldest;
}

int SlotPool::take(int group) {
  const int s = pick(true);
  ANVIL_CHECK(s >= 0, "[parallel] every one of the {} slots is in use", count());
  Slot& slot = slots_[static_cast<size_t>(s)];
  slot.group = group;
  slot.prepared = false;
  slot.last_taken = ++clock_;
  return s;
}

int SlotPool::take_unclaimed(int group, const std::function<bool(int)>& keep) {
  int best = -1;
  for (int s = 0; s < count(); ++s) {
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (slot.in_use || (slot.group >= 0 && keep(slot.group))) continue;
    if (best < 0 || slot.last_taken < slots_[static_cast<size_t>(best)].last_taken) best = s;
  }
  if (best < 0) return best;
  wait(best);
  Slot& slot = slots_[static_cast<size_t>(best)];
  slot.group = group;
  slot.prepared = false;
  slot.last_taken = ++clock_;
  return best;
}

int SlotPool::take_without_waiting(int group) {
  const int s = pick(false);
  if (s < 0) return s;
  Slot& slot = slots_[static_cast<size_t>(s)];
  slot.group = group;
  slot.prepared = false;
  slot.last_taken = ++clock_;
  return s;
}

void SlotPool::set_pending(int s, std::vector<std::unique_ptr<CommHandle>> handles) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  wait(s);
  slot.pending = std::move(handles);
  slot.pending_order = ++clock_;
}

void SlotPool::wait(int s) {
  Slot& slot = slots_[static_cast<size_t>(s)];
  for (auto& handle : slot.pending) handle->wait();
  slot.pending.clear();
}

void SlotPool::poll() {
  for (Slot& slot : slots_) {
    bool done = true;
    for (auto& handle : slot.pending) done = handle->test() && done;
    if (done) slot.pending.clear();
  }
}

void SlotPool::wait_all() {
  for (int s = 0; s < count(); ++s) wait(s);
}

void SlotPool::forget_cached() {
  for (Slot& slot : slots_) {
    if (!slot.in_use) {
      slot.group = -1;
      slot.prepared = false;
    }
  }
}

}  // namespace anvil
