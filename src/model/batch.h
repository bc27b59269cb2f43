// Batch and LossSum: what a training or evaluation step consumes and returns. Inputs are
// (B, T) tensors on the host or on the model's device; targets equal to kIgnoreIndex, or
// positions whose loss_mask is 0, add no loss and no gradient (the loss mask is 0/1).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace anvil {

// Target id that marks a position without loss (the Hugging Face / PyTorch convention).
inline constexpr int kIgnoreIndex = -100;

struct Batch {
  Tensor tokens;                      // (B, T) i32 input ids
  Tensor targets;                     // (B, T) i32 next-token ids or kIgnoreIndex
  const Tensor* loss_mask = nullptr;  // optional (B, T) f32, 1 = counted, 0 = not counted
  const Tensor* doc_ids = nullptr;    // optional (B, T) i32: attend within a document only
};

// The sum of token losses of a batch and the number of tokens that were counted.
struct LossSum {
  double sum = 0.0;
  int64_t count = 0;

  // Returns the mean loss per counted token (0 when nothing was counted).
  double mean() const { return count > 0 ? sum / static_cast<double>(count) : 0.0; }
  LossSum& operator+=(const LossSum& other) {
    sum += other.sum;
    count += other.count;
    return *this;
  }
};

}  // namespace anvil
