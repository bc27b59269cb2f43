// DataLoader: training and evaluation samples from the token shards of one split.
// The split's parts form one token stream of T tokens, cut into W = (T - 1) / seq_len windows;
// window w covers tokens [w * seq_len, w * seq_len + seq_len + 1). Global sample i belongs to
// epoch e = i / W and reads window perm_e[i % W], where perm_e = epoch_permutation(W, seed, e)
// (data/random.h), or window i % W when shuffle is off (sequential evaluation). Which data a
// sample holds therefore depends only on (files, seq_len, seed, i): never on the world size,
// the batch layout or the thread count. The trainer's resume state is just its next sample
// index (DataCursor in data/cursor.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sample_source.h"
#include "data/shard_set.h"

namespace anvil {

class DataLoader : public SampleSource {
 public:
  // Opens every part of `split` in `dir`; throws when the split has fewer than seq_len + 1
  // tokens. Not thread-safe: one loader per reading thread.
  DataLoader(const std::string& dir, const std::string& split, int seq_len, uint64_t seed,
             bool shuffle = true);

  void fill(int64_t first_sample, int count, const Tensor& tokens, const Tensor& targets,
            const Tensor* doc_ids, const Tensor* loss_mask) override;
  int32_t vocab_size() const override { return shards_.vocab_size(); }
  int seq_len() const override { return seq_len_; }

  // Returns W, the number of windows (samples) in one epoch.
  int64_t windows_per_epoch() const { return windows_; }
  // Returns the number of windows a sequential pass visits (samples 0 .. W-1 with shuffle off;
  // the last (T - 1) % seq_len targets are not covered).
  int64_t eval_windows() const { return windows_; }
  // Returns the window index sample i reads.
  int64_t window_of_sample(int64_t sample);
  const std::string& tokenizer_fingerprint() const { return shards_.tokenizer_fingerprint(); }
  int32_t eos_id() const { return shards_.eos_id(); }
  uint64_t token_count() const { return shards_.token_count(); }
  uint64_t seed() const { return seed_; }
  bool shuffled() const { return shuffle_; }
  const ShardSet& shards() const { return shards_; }

 private:
  ShardSet shards_;
  int seq_len_;
  uint64_t seed_;
  bool shuffle_;
  int64_t windows_ = 0;
  int64_t cached_epoch_ = -1;  // epoch whose permutation `permutation_` holds
  std::vector<uint32_t> permutation_;
  std::vector<int32_t> window_buffer_;
};

}  // namespace anvil
