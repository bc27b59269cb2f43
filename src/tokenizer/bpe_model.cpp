// BPE merging and the per-thread word cache.
#include "tokenizer/bpe_model.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <queue>

#include <fmt/format.h>

#include "tokenizer/utf8.h"

namespace anvil::tok {
namespace {

// Word -> ids memo for one model on one thread. Bounded: when full it is cleared, so memory
// stays flat on corpora with many rare words while frequent words are re-learned at once.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;
  static constexpr size_t kSlots = size_t{1} << 16;
  static constexpr size_t kMaxEntries = kSlots / 2;

  // Appends the cached ids of `word` to `out`; returns false on a miss.
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
    if (slots_.empty()) return false;
    size_t slot = hash & (kSlots - 1);
    while (true) {
      const Slot& s = slots_[slot];
      if (s.key_length == kEmpty) return false;
      if (s.hash == hash && s.key_length == word.size() &&
          std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_offset,
                   ids_.begin() + s.ids_offset + s.ids_length);
        return true;
      }
      slot = (slot + 1) & (kSlots - 1);
    }
  }

  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t count) {
    if (slots_.empty()) slots_.assign(kSlots, Slot{});
    if (size_ >= kMaxEntries) clear();
    size_t slot = hash & (kSlots - 1);
    while (slots_[slot].key_length != kEmpty) slot = (slot + 1) & (kSlots - 1);
    slots_[slot] = Slot{hash, static_cast<uint32_t>(keys_.size()),
                        static_cast<uint32_t>(word.size()), static_cast<uint32_t>(ids_.size()),
                        static_cast<uint32_t>(count)};
    keys_.append(word);
    ids_.insert(ids_.end(), ids, ids + count);
    ++size_;
  }

 private:
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    size_ = 0;
  }

  static constexpr uint32_t kEmpty = ~0u;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0;
    uint32_t key_length = kEmpty;
    uint32_t ids_offset = 0;
    uint32_t ids_length = 0;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t size_ = 0;
};

// Returns this thread's cache for model `owner`. A thread keeps caches for its few most
// recently used models, so alternating between two tokenizers does not wipe either cache.
WordCache& thread_cache(uint64_t owner) {
  constexpr size_t kModelsPerThread = 4;
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<WordCache>>> caches;
  for (size_t i = 0; i < caches.size(); ++i) {
    if (caches[i].first != owner) continue;
    if (i != 0) std::swap(caches[i], caches[0]);  // most recent first
    return *caches[0].second;
  }
  if (caches.size() == kModelsPerThread) caches.pop_back();
  caches.insert(caches.begin(), {owner, std::make_unique<WordCache>()});
  return *caches[0].second;
}

std::atomic<uint64_t> next_instance_id{1};

}  // namespace

BpeModel::BpeModel(BpeConfig config, StringIdMap vocab, const std::vector<BpeMerge>& merges)
    : config_(std::move(config)),
      vocab_(std::move(vocab)),
      merges_(merges.size()),
      instance_id_(next_instance_id.fetch_add(1)) {
  for (const BpeMerge& m : merges)
    merges_.set(pair_key(m.left, m.right),
                (static_cast<uint64_t>(m.rank) << 32) | static_cast<uint32_t>(m.merged));
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    byte_ids_[b] = vocab_.find(std::string_view(&byte, 1)).value_or(-1);
    byte_fallback_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (config_.ignore_merges) {
    if (auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < WordCache::kMaxWordBytes;
  const uint64_t hash = cacheable ? hash_bytes(word) : 0;
  WordCache& cache = thread_cache(instance_id_);
  if (cacheable && cache.lookup(word, hash, out)) return;

  thread_local std::vector<int32_t> symbols;
  initial_symbols(word, symbols);
  if (symbols.size() <= kLinearLimit)
    merge_linear(symbols);
  else
    merge_heap(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) cache.insert(word, hash, symbols.data(), symbols.size());
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  symbols.clear();
  // Unknown units follow Hugging Face: byte fallback when every byte has a <0xXX> token, else
  // the unk token (fused across a run when fuse_unk), else the unit is dropped.
  bool pending_unk = false;
  auto flush_unk = [&] {
    if (pending_unk) symbols.push_back(*config_.unk_id);
    pending_unk = false;
  };
  size_t pos = 0;
  while (pos < word.size()) {
    size_t length = 1;
    int32_t id = -1;
    if (config_.byte_units) {
      id = byte_ids_[static_cast<unsigned char>(word[pos])];
    } else {
      length = utf8_char_length(word, pos);
      if (length == 0) length = 1;  // a stray invalid byte is its own unit
      id = vocab_.find(word.substr(pos, length)).value_or(-1);
    }
    const std::string_view unit = word.substr(pos, length);
    pos += length;
    if (id >= 0) {
      flush_unk();
      symbols.push_back(id);
      continue;
    }
    if (config_.byte_fallback) {
      bool all = true;
      for (unsigned char b : unit) all = all && byte_fallback_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : unit) symbols.push_back(byte_fallback_ids_[b]);
        continue;
      }
    }
    if (!config_.unk_id) continue;
    if (pending_unk && !config_.fuse_unk) symbols.push_back(*config_.unk_id);
    pending_unk = true;
  }
  flush_unk();
}

void BpeModel::merge_linear(std::vector<int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  // ranks[i] describes the pair (symbols[i], symbols[i + 1]); rank sits in the high half, so
  // the smallest value is the lowest rank and equal ranks always name the same merged token.
  thread_local std::vector<uint64_t> ranks;
  ranks.resize(symbols.size() - 1);
  for (size_t i = 0; i + 1 < symbols.size(); ++i) ranks[i] = pair_merge(symbols[i], symbols[i + 1]);
  while (!ranks.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < ranks.size(); ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoMerge) break;
    symbols[best] = static_cast<int32_t>(static_cast<uint32_t>(ranks[best]));
    symbols.erase(symbols.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best));
    if (best > 0) ranks[best - 1] = pair_merge(symbols[best - 1], symbols[best]);
    if (best < ranks.size()) ranks[best] = pair_merge(symbols[best], symbols[best + 1]);
  }
}

void BpeModel::merge_heap(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  thread_local std::vector<int32_t> prev;
  thread_local std::vector<int32_t> next;
  prev.resize(n);
  next.resize(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  // Entries are (merge, position); the smallest merge value, then the leftmost position, wins.
  using Entry = std::pair<uint64_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  for (size_t i = 0; i + 1 < n; ++i) {
    const uint64_t merge = pair_merge(symbols[i], symbols[i + 1]);
    if (merge != kNoMerge) queue.emplace(merge, static_cast<int32_t>(i));
  }
  constexpr int32_t kRemoved = -2;
  while (!queue.empty()) {
    const auto [merge, pos] = queue.top();
    queue.pop();
    const int32_t right = next[pos];
    if (prev[pos] == kRemoved || right < 0) continue;
    if (pair_merge(symbols[pos], symbols[right]) != merge) continue;  // stale entry
    symbols[pos] = static_cast<int32_t>(static_cast<uint32_t>(merge));
    const int32_t after = next[right];
    next[pos] = after;
    prev[right] = kRemoved;
    if (after >= 0) prev[after] = pos;
    if (prev[pos] >= 0) {
      const uint64_t left_merge = pair_merge(symbols[prev[pos]], symbols[pos]);
      if (left_merge != kNoMerge) queue.emplace(left_merge, prev[pos]);
    }
    if (after >= 0) {
      const uint64_t right_merge = pair_merge(symbols[pos], symbols[after]);
      if (right_merge != kNoMerge) queue.emplace(right_merge, pos);
    }
  }
  size_t kept = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

}  // namespace anvil::tok
