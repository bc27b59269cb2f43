// SyntheticData: a SampleSource that needs no files, for benchmarks (--data.synthetic=true)
// and tests. Token p (0 <= p <= seq_len) of sample i is
//   (hash_triple(seed, i, p) * vocab_size) >> 64        (128-bit product, data/random.h)
// so every sample is a pure function of (seed, i) and, like DataLoader, independent of the
// world size and of which rank asks. Each sample is one document with every target trained.
#pragma once

#include <cstdint>

#include "data/sample_source.h"

namespace anvil {

class SyntheticData : public SampleSource {
 public:
  // Throws when vocab_size or seq_len is below 1.
  SyntheticData(int32_t vocab_size, int seq_len, uint64_t seed);

  void fill(int64_t first_sample, int count, const Tensor& tokens, const Tensor& targets,
            const Tensor* doc_ids, const Tensor* loss_mask) override;
  int32_t vocab_size() const override { return vocab_size_; }
  int seq_len() const override { return seq_len_; }
  // Returns token `position` (0..seq_len) of sample `sample`.
  int32_t token(int64_t sample, int position) const;

 private:
  int32_t vocab_size_;
  int seq_len_;
  uint64_t seed_;
};

}  // namespace anvil
