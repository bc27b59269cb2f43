// The vocabulary-parallel ends of the network under tensor parallelism: tp rank t holds rows
// [t*V/tp, (t+1)*V/tp) of the embedding table and of the lm head, so each rank computes only
// its columns of the logits and the full (N, V) logits never exist anywhere.
//   embedding  each rank looks up the ids of its rows (zero rows for the others); the tp
//              all-reduce of the block output sums the one non-zero row per position.
//   loss       each rank reduces its logit columns to three numbers per row (max, sum of
//              exponentials, target logit when the target is its own); the ranks all-gather
//              them (3 floats per row per rank), and every rank combines them in rank order
//              into the same logsumexp and loss; the backward pass then needs only the rank's
//              own columns and that logsumexp.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/arena.h"
#include "model/block_context.h"

namespace anvil {

// Device buffers (carved once) and host staging of the vocabulary-parallel loss.
struct VocabParallelScratch {
  Tensor stats;      // (chunk_rows, 3) f32: this rank's per-row statistics
  Tensor all_stats;  // (tp * chunk_rows * 3) f32: every rank's, in rank order
  Tensor lse;        // (chunk_rows) f32: full-row logsumexp
  std::vector<float> host_stats;
  std::vector<float> host_losses;
  std::vector<float> host_lse;
  std::vector<int32_t> host_targets;
  std::vector<float> host_mask;

  // Carves the device buffers and sizes the host staging for chunks of `chunk_rows` rows.
  void carve(Arena& arena, int64_t chunk_rows, int tp);
};

// Combines every rank's statistics (all_stats: tp blocks of (rows, 3) f32) into losses (rows)
// and lse (rows): M = max_t m_t, S = sum_t s_t * exp(m_t - M) in double and rank order,
// lse = M + log S, loss = (lse - sum_t target_logit_t) * mask, and 0 for rows whose target is
// ignore_index or whose mask (nullptr: all ones) is 0.
void combine_cross_entropy_stats(const float* all_stats, int tp, int64_t rows,
                                 const int32_t* targets, const float* mask, int ignore_index,
                                 float* losses, float* lse);

// Runs the vocabulary-parallel cross-entropy of one chunk: logits (rows, V/tp) f32 are this
// rank's columns; losses (rows) f32 =; when dlogits is given, dlogits (rows, V/tp) =
// (softmax - onehot) * mask * grad_scale (it may alias logits). Collective over tp.
void vocab_parallel_cross_entropy(const BlockContext& ctx, const Tensor& logits,
                                  const Tensor& targets, const Tensor& loss_mask,
                                  const Tensor& losses, const Tensor* dlogits, float grad_scale);

}  // namespace anvil
