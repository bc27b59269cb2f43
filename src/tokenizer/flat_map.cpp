// String hashing and StringIdMap growth.
#include "tokenizer/flat_map.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace anvil::tok {

uint64_t hash_bytes(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

bool StringIdMap::insert(std::string_view key, int32_t id) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t hash = hash_bytes(key);
  size_t slot = hash & mask_;
  while (slots_[slot].length != kEmptyLength) {
    const Slot& s = slots_[slot];
    if (s.hash == hash && s.length == key.size() &&
        std::string_view(pool_.data() + s.offset, s.length) == key)
      return false;
    slot = (slot + 1) & mask_;
  }
  slots_[slot] = Slot{hash, pool_.size(), static_cast<uint32_t>(key.size()), id};
  pool_.append(key);
  ++size_;
  return true;
}

void StringIdMap::grow() {
  const size_t capacity = slots_.empty() ? 64 : slots_.size() * 2;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (const Slot& s : old) {
    if (s.length == kEmptyLength) continue;
    size_t slot = s.hash & mask_;
    while (slots_[slot].length != kEmptyLength) slot = (slot + 1) & mask_;
    slots_[slot] = s;
  }
}

}  // namespace anvil::tok
