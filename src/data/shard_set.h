// ShardSet: the parts of one split ("train-00000.tok", "train-00001.tok", ...) of a prepared
// dataset folder, read as one concatenated token stream. Parts must be numbered from 00000
// without gaps and agree on vocabulary, tokenizer fingerprint and special ids; any stray or
// missing part is an error rather than silently shorter data. Documents never span parts, so
// a part boundary is always a document start. A dataset written by N `anvil prepare --part i/N`
// runs (prepare.h) reads as the shards of its folders part-00000-of-N, part-00001-of-N, ... in
// that order; a folder with any of them missing is refused, naming the missing ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard_reader.h"

namespace anvil {

class ShardSet {
 public:
  // Opens and validates every part of `split` in `dir`.
  ShardSet(const std::string& dir, const std::string& split);

  uint64_t token_count() const { return total_tokens_; }
  uint64_t document_count() const { return total_documents_; }
  int32_t vocab_size() const { return static_cast<int32_t>(parts_.front().header().vocab_size); }
  int32_t eos_id() const { return parts_.front().header().eos_id; }
  int32_t bos_id() const { return parts_.front().header().bos_id; }
  const std::string& tokenizer_fingerprint() const {
    return parts_.front().header().tokenizer_fingerprint;
  }
  // Returns true when at least one part carries a loss mask (parts without one count as 1s).
  bool has_loss_mask() const { return has_loss_mask_; }
  // Returns the paths of the parts in order.
  std::vector<std::string> files() const;
  // Returns a description like "split 'train' of data/ (3 parts)" for messages.
  std::string describe() const;

  // Copies tokens [begin, begin + count) of the concatenated stream into `out`.
  void read_tokens(uint64_t begin, uint64_t count, int32_t* out) const;
  // Writes the loss mask of tokens [begin, begin + count) as 0.0/1.0 into `out`.
  void read_loss_mask(uint64_t begin, uint64_t count, float* out) const;
  // Writes, for each position of [begin, begin + count), how many documents start after
  // `begin` up to and including that position (so 0 at the first position). Documents are
  // located by the shards' offsets, not by scanning for EOS ids.
  void read_doc_ids(uint64_t begin, uint64_t count, int32_t* out) const;

 private:
  // Returns the index of the part holding global token `index`.
  size_t part_of(uint64_t index) const;

  std::string dir_;
  std::string split_;
  std::vector<ShardReader> parts_;
  std::vector<uint64_t> part_starts_;  // global index of each part's first token
  uint64_t total_tokens_ = 0;
  uint64_t total_documents_ = 0;
  bool has_loss_mask_ = false;
};

}  // namespace anvil
