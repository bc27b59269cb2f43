// SampleSource: what the trainer and evaluator read batches from. Samples are numbered by a
// global index 0, 1, 2, ... that never depends on the world size; sample i is a window of
// seq_len + 1 tokens, whose first seq_len are the inputs and last seq_len the targets.
// Implementations: DataLoader (token shards) and SyntheticData (hash-generated tokens).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace anvil {

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  // Fills row r of each tensor with sample first_sample + r, for r in [0, count):
  // tokens/targets (count, seq_len) i32 on the host; doc_ids (count, seq_len) i32 counts
  // the documents started since the window's first position (for per-document attention
  // masks); loss_mask (count, seq_len) f32 is 1 where the target token is trained on.
  // doc_ids and loss_mask may be null.
  virtual void fill(int64_t first_sample, int count, const Tensor& tokens, const Tensor& targets,
                    const Tensor* doc_ids, const Tensor* loss_mask) = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int seq_len() const = 0;
};

// Checks the shapes, dtypes and host placement of fill()'s tensors.
void check_fill_tensors(int count, int seq_len, const Tensor& tokens, const Tensor& targets,
                        const Tensor* doc_ids, const Tensor* loss_mask);

}  // namespace anvil
