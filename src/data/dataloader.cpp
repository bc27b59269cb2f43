// DataLoader implementation: sample index -> (epoch, window) -> tokens, doc ids, loss mask.
// One epoch's permutation is cached; crossing into another epoch recomputes it (O(W)).
#include "data/dataloader.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "data/random.h"

namespace anvil {

DataLoader::DataLoader(const std::string& dir, const std::string& split, int seq_len, uint64_t seed,
                       bool shuffle)
    : shards_(dir, split), seq_len_(seq_len), seed_(seed), shuffle_(shuffle) {
  ANVIL_CHECK(seq_len >= 1, "[data] seq_len must be at least 1, got {}", seq_len);
  const uint64_t tokens = shards_.token_count();
  ANVIL_CHECK(tokens >= static_cast<uint64_t>(seq_len) + 1,
              "[data] {} holds {} tokens, too few for one sample of seq_len {} (needs {})",
              shards_.describe(), tokens, seq_len, static_cast<uint64_t>(seq_len) + 1);
  const uint64_t windows = (tokens - 1) / static_cast<uint64_t>(seq_len);
  ANVIL_CHECK(windows <= std::numeric_limits<uint32_t>::max(),
              "[data] {} has {} windows of seq_len {}; at most 2^32-1 per split are supported",
              shards_.describe(), windows, seq_len);
  windows_ = static_cast<int64_t>(windows);
  window_buffer_.resize(static_cast<size_t>(seq_len) + 1);
}

int64_t DataLoader::window_of_sample(int64_t sample) {
  ANVIL_CHECK(sample >= 0, "[data] sample index must not be negative, got {}", sample);
  const int64_t epoch = sample / windows_;
  const int64_t position = sample % windows_;
  if (!shuffle_) return position;
  if (epoch != cached_epoch_) {
    permutation_ = data::epoch_permutation(static_cast<uint32_t>(windows_), seed_,
                                           static_cast<uint64_t>(epoch));
    cached_epoch_ = epoch;
  }
  return permutation_[static_cast<size_t>(position)];
}

void DataLoader::fill(int64_t first_sample, int count, const Tensor& tokens, const Tensor& targets,
                      const Tensor* doc_ids, const Tensor* loss_mask) {
  check_fill_tensors(count, seq_len_, tokens, targets, doc_ids, loss_mask);
  ANVIL_CHECK(first_sample >= 0, "[data] first sample must not be negative, got {}", first_sample);
  const size_t row = static_cast<size_t>(seq_len_);
  for (int r = 0; r < count; ++r) {
    const uint64_t start =
        static_cast<uint64_t>(window_of_sample(first_sample + r)) * static_cast<uint64_t>(row);
    shards_.read_tokens(start, row + 1, window_buffer_.data());
    std::copy_n(window_buffer_.begin(), row, tokens.i32() + r * row);
    std::copy_n(window_buffer_.begin() + 1, row, targets.i32() + r * row);
    if (doc_ids != nullptr) shards_.read_doc_ids(start, row, doc_ids->i32() + r * row);
    if (loss_mask != nullptr) shards_.read_loss_mask(start + 1, row, loss_mask->f32() + r * row);
  }
}

}  // namespace anvil
