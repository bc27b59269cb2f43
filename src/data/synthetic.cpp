// SyntheticData implementation: counter-based hashing, no state between calls.
#include "data/synthetic.h"

#include <algorithm>

#include "core/error.h"
#include "data/random.h"

namespace anvil {

SyntheticData::SyntheticData(int32_t vocab_size, int seq_len, uint64_t seed)
    : vocab_size_(vocab_size), seq_len_(seq_len), seed_(seed) {
  ANVIL_CHECK(vocab_size >= 1, "[data] synthetic vocab_size must be at least 1, got {}",
              vocab_size);
  ANVIL_CHECK(seq_len >= 1, "[data] synthetic seq_len must be at least 1, got {}", seq_len);
}

int32_t SyntheticData::token(int64_t sample, int position) const {
  const uint64_t h =
      data::hash_triple(seed_, static_cast<uint64_t>(sample), static_cast<uint64_t>(position));
  return static_cast<int32_t>(
      (static_cast<unsigned __int128>(h) * static_cast<uint64_t>(vocab_size_)) >> 64);
}

void SyntheticData::fill(int64_t first_sample, int count, const Tensor& tokens,
                         const Tensor& targets, const Tensor* doc_ids, const Tensor* loss_mask) {
  check_fill_tensors(count, seq_len_, tokens, targets, doc_ids, loss_mask);
  ANVIL_CHECK(first_sample >= 0, "[data] first sample must not be negative, got {}", first_sample);
  const int64_t row = seq_len_;
  for (int r = 0; r < count; ++r) {
    int32_t* inputs = tokens.i32() + r * row;
    int32_t* shifted = targets.i32() + r * row;
    int32_t previous = token(first_sample + r, 0);
    for (int p = 0; p < seq_len_; ++p) {
      const int32_t next = token(first_sample + r, p + 1);
      inputs[p] = previous;
      shifted[p] = next;
      previous = next;
    }
    if (doc_ids != nullptr) std::fill_n(doc_ids->i32() + r * row, row, 0);
    if (loss_mask != nullptr) std::fill_n(loss_mask->f32() + r * row, row, 1.0f);
  }
}

}  // namespace anvil
