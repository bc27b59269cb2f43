// Rules every backend shares, kept in one place so no backend can drift from the others: the
// f32 coefficients of an AdamW update (torch.optim.AdamW's rounding, which the golden test
// pins), and the range checks of token ids and loss targets. The checks run on host memory
// only: Backend calls them for a host backend before its kernel writes anything, and the
// model calls them on its inputs before uploading them to a device (a device kernel never
// reads its ids back to check them).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace anvil {

// The f32 scalars of one AdamW update, each rounded from double exactly where PyTorch rounds
// it (cpu/reference/adamw.cpp has the derivation):
//   g = grad * grad_scale; p *= decay; m = m * beta1 + g * one_minus_beta1;
//   v = v * beta2 + one_minus_beta2 * g * g; denom = sqrt(v) / bias_correction2_sqrt + eps;
//   p += neg_step_size * m / denom.
struct AdamWScalars {
  float grad_scale, decay, beta1, beta2, one_minus_beta1, one_minus_beta2;
  float neg_step_size, bias_correction2_sqrt, eps;
};

// Returns the scalars of an update with `params` and weight decay `weight_decay`.
AdamWScalars adamw_scalars(const AdamWParams& params, float weight_decay);

// Throws "[<op>] token id 70000 out of range [0, 32000) at position 3" for the first id of
// ids (n) outside [0, vocab).
void check_token_ids(const char* op, const int32_t* ids, int64_t n, int64_t vocab);
// Throws "[<op>] token id -1 is negative at position 3": a vocabulary shard accepts any
// non-negative id (ids of other shards are simply not its rows).
void check_token_ids_not_negative(const char* op, const int32_t* ids, int64_t n);
// Throws "[<op>] target 70000 out of range [0, 37) at row 3 (ignore_index is -100)" for the
// first target outside [0, vocab) that is not ignore_index.
void check_targets(const char* op, const int32_t* targets, int64_t n, int64_t vocab,
                   int ignore_index);
// Throws "[<op>] target -5 is negative at row 3 (ignore_index is -100)" (vocabulary shards).
void check_targets_not_negative(const char* op, const int32_t* targets, int64_t n,
                                int ignore_index);

}  // namespace anvil
