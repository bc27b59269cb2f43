// SlotPool: a few buffers, each big enough for the largest parameter group of one kind, that
// hold one group's gathered weights or full gradient at a time (ZeRO stages 2 and 3). A slot is
//   in use   while the model reads or writes it (between a group's hooks),
//   pending  while a collective reads or writes it (a prefetch gather, a gradient
//            reduce-scatter), and
//   cached   when it still holds a complete copy of its group's weights.
// A slot is reused only when neither in use nor pending; taking one waits for the oldest
// pending collective when every free slot is still busy. Choices depend only on the order of
// calls, which every rank makes identically, so all ranks issue collectives in one order.
// Slots are gather and reduce buffers: their memory counts as communication.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/buffer.h"

namespace anvil {

// Returns `elements` of `dtype` starting `byte_offset` bytes into `buffer` (checked).
Tensor buffer_view(const Buffer& buffer, DType dtype, size_t byte_offset, int64_t elements);

class SlotPool {
 public:
  SlotPool() = default;
  // Allocates `count` slots of `elements` f32 each (none when count is 0).
  SlotPool(Backend& backend, int count, int64_t elements)
      : SlotPool(backend, count, static_cast<size_t>(elements) * sizeof(float)) {}
  // Allocates `count` slots of `bytes` bytes each (uninitialised).
  SlotPool(Backend& backend, int count, size_t bytes);

  int count() const { return static_cast<int>(slots_.size()); }
  // Returns the first `elements` of slot s as f32.
  Tensor tensor(int s, int64_t elements) const { return view(s, DType::f32, 0, elements); }
  // Returns `elements` of `dtype` starting `byte_offset` bytes into slot s.
  Tensor view(int s, DType dtype, size_t byte_offset, int64_t elements) const {
    return buffer_view(buffer(s), dtype, byte_offset, elements);
  }
  const Buffer& buffer(int s) const { return slots_[static_cast<size_t>(s)].buffer; }
  // Returns the slot that holds (or is receiving) `group`, or -1.
  int find(int group) const;
  // Returns a slot for `group`, neither in use nor pending, forgetting what it held; waits for
  // pending collectives (oldest first) when every slot not in use is busy. -1 when all are in
  // use (a caller bug: the pool is too small).
  int take(int group);
  // Like take, but returns -1 instead of waiting.
  int take_without_waiting(int group);
  // Returns a slot for `group`: the least recently taken slot that is not in use and whose
  // group `keep` does not claim, waiting for its collective if one is pending; -1 when there
  // is none. The choice depends only on the calls made, never on when collectives finish.
  int take_unclaimed(int group, const std::function<bool(int)>& keep);

  void set_in_use(int s, bool in_use) { slots_[static_cast<size_t>(s)].in_use = in_use; }
  bool in_use(int s) const { return slots_[static_cast<size_t>(s)].in_use; }
  // Marks slot s's content as prepared for use (set by the owner; cleared when s is taken).
  void set_prepared(int s) { slots_[static_cast<size_t>(s)].prepared = true; }
  bool prepared(int s) const { return slots_[static_cast<size_t>(s)].prepared; }
  // Records the collectives that now read or write slot s (after waiting for earlier ones).
  void set_pending(int s, std::vector<std::unique_ptr<CommHandle>> handles);
  // Waits for slot s's collective, if any.
  void wait(int s);
  // Advances every pending collective without blocking.
  void poll();
  // Waits for every pending collective.
  void wait_all();
  // Forgets every cached group (their contents are stale); slots in use stay assigned.
  void forget_cached();

 private:
  struct Slot {
    Buffer buffer;
    int group = -1;
    bool in_use = false;
    bool prepared = false;
    std::vector<std::unique_ptr<CommHandle>> pending;  // empty when none is in flight
    uint64_t pending_order = 0;  // when the pending collective started
    uint64_t last_taken = 0;
  };
  int pick(bool allow_waiting);

  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
};

}  // namespace anvil
