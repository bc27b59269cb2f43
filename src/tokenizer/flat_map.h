// Open-addressing hash tables for the tokenizer's hot paths: the BPE merge table (a pair of
// token ids -> rank and merged id) and string -> id lookups keyed by string_view without
// allocating. Invariants: capacity is a power of two kept at most half full, so probes are
// short and always end at an empty slot; keys are never erased (tables are built once, or
// cleared as a whole).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::tok {

// Returns a 64-bit hash of bytes (xxHash3).
uint64_t hash_bytes(std::string_view bytes);

// uint64 key -> uint64 value. The all-ones key is reserved as the empty marker.
class U64Map {
 public:
  static constexpr uint64_t kEmpty = ~0ull;

  explicit U64Map(size_t expected = 16) { rehash(expected); }

  // Inserts or overwrites the value of `key`.
  void set(uint64_t key, uint64_t value) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size());
    size_t slot = slot_of(key);
    while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask_;
    if (keys_[slot] == kEmpty) {
      keys_[slot] = key;
      ++size_;
    }
    values_[slot] = value;
  }

  // Returns a pointer to the value of `key`, or nullptr.
  const uint64_t* find(uint64_t key) const {
    size_t slot = slot_of(key);
    while (true) {
      const uint64_t k = keys_[slot];
      if (k == key) return &values_[slot];
      if (k == kEmpty) return nullptr;
      slot = (slot + 1) & mask_;
    }
  }

  // Returns a reference to the value of `key`, inserting `initial` first when absent.
  uint64_t& at_or_insert(uint64_t key, uint64_t initial) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size());
    size_t slot = slot_of(key);
    while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask_;
    if (keys_[slot] == kEmpty) {
      keys_[slot] = key;
      values_[slot] = initial;
      ++size_;
    }
    return values_[slot];
  }

  size_t size() const { return size_; }

  // Calls fn(key, value) for every entry, in slot order.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != kEmpty) fn(keys_[i], values_[i]);
  }

 private:
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void rehash(size_t at_least) {
    size_t capacity = 16;
    while (capacity < at_least * 2) capacity *= 2;
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<uint64_t> old_values = std::move(values_);
    keys_.assign(capacity, kEmpty);
    values_.assign(capacity, 0);
    mask_ = capacity - 1;
    shift_ = 64 - __builtin_ctzll(capacity);
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != kEmpty) set(old_keys[i], old_values[i]);
  }

  std::vector<uint64_t> keys_;
  std::vector<uint64_t> values_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// Byte string -> int32 id. Keys are copied into one pool; lookups take a string_view.
class StringIdMap {
 public:
  // Inserts `key` with `id` unless the key is present; returns false when it was present.
  bool insert(std::string_view key, int32_t id);
  // Returns the id of `key`, or nullopt.
  std::optional<int32_t> find(std::string_view key) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t hash = hash_bytes(key);
    size_t slot = hash & mask_;
    while (true) {
      const Slot& s = slots_[slot];
      if (s.length == kEmptyLength) return std::nullopt;
      if (s.hash == hash && s.length == key.size() &&
          std::string_view(pool_.data() + s.offset, s.length) == key)
        return s.id;
      slot = (slot + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmptyLength = ~0u;
  struct Slot {
    uint64_t hash = 0;
    uint64_t offset = 0;
    uint32_t length = kEmptyLength;
    int32_t id = 0;
  };
  void grow();

  std::vector<Slot> slots_;
  std::string pool_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace anvil::tok
