// The BPE model: turns one pre-token ("word") into ids by rank-ordered merging, as Hugging
// Face's BPE and tiktoken both do: repeatedly merge the adjacent pair with the lowest rank,
// leftmost first, until no adjacent pair has a merge. Words up to kLinearLimit symbols use a
// linear scan over cached pair ranks; longer words (SentencePiece-style lines with no
// pre-tokenizer) use a heap, so a word of n symbols costs O(n log n).
// Units: byte-level models work on raw bytes (the vocab is stored as the bytes the GPT-2
// alphabet spells), other models on UTF-8 characters. Results per word are kept in a
// thread-local cache, so concurrent encode() calls on one model need no locks.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/flat_map.h"

namespace anvil::tok {

struct BpeMerge {
  int32_t left = 0;
  int32_t right = 0;
  int32_t merged = 0;
  uint32_t rank = 0;  // lower merges first
};

struct BpeConfig {
  bool byte_units = false;     // initial symbols are single bytes (byte-level models)
  bool ignore_merges = false;  // a word that is itself in the vocab is emitted whole
  bool byte_fallback = false;  // unknown characters become <0xXX> byte tokens
  bool fuse_unk = false;       // consecutive unknown characters share one unk id
  std::optional<int32_t> unk_id;
};

class BpeModel {
 public:
  // Builds the model from unit-domain vocab keys and merges (a later duplicate pair wins).
  BpeModel(BpeConfig config, StringIdMap vocab, const std::vector<BpeMerge>& merges);

  // Appends the ids of one pre-token to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Returns the id of a unit-domain vocab entry.
  std::optional<int32_t> find(std::string_view token) const { return vocab_.find(token); }
  const BpeConfig& config() const { return config_; }

  static constexpr size_t kLinearLimit = 96;

 private:
  static constexpr uint64_t kNoMerge = ~0ull;
  // Returns (rank << 32 | merged id) for the pair, or kNoMerge.
  uint64_t pair_merge(int32_t left, int32_t right) const {
    const uint64_t* found = merges_.find(pair_key(left, right));
    return found ? *found : kNoMerge;
  }
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  void merge_linear(std::vector<int32_t>& symbols) const;
  void merge_heap(std::vector<int32_t>& symbols) const;

  BpeConfig config_;
  StringIdMap vocab_;
  U64Map merges_;
  std::array<int32_t, 256> byte_ids_{};           // byte units: the id of each single byte
  std::array<int32_t, 256> byte_fallback_ids_{};  // the id of "<0xXX>" for each byte, or -1
  uint64_t instance_id_;  // keys this model's entries in the thread-local word cache
};

}  // namespace anvil::tok
