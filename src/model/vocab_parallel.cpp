// Vocabulary-parallel cross-entropy: statistics per shard, an all-gather of 3 floats per row
// per rank, the same host-side combination on every rank, then the shard's gradient.
#include "model/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/batch.h"

namespace anvil {

void VocabParallelScratch::carve(Arena& arena, int64_t chunk_rows, int tp) {
  stats = arena.take(DType::f32, Shape{chunk_rows, 3});
  all_stats = arena.take(DType::f32, Shape{tp * chunk_rows * 3});
  lse = arena.take(DType::f32, Shape{chunk_rows});
  host_stats.resize(static_cast<size_t>(tp * chunk_rows * 3));
  host_losses.resize(static_cast<size_t>(chunk_rows));
  host_lse.resize(static_cast<size_t>(chunk_rows));
  host_targets.resize(static_cast<size_t>(chunk_rows));
  host_mask.resize(static_cast<size_t>(chunk_rows));
}

void combine_cross_entropy_stats(const float* all_stats, int tp, int64_t rows,
                                 const int32_t* targets, const float* mask, int ignore_index,
                                 float* losses, float* lse) {
  for (int64_t n = 0; n < rows; ++n) {
    float row_max = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < tp; ++t) row_max = std::max(row_max, all_stats[(t * rows + n) * 3]);
    double sum = 0.0, target_logit = 0.0;
    for (int t = 0; t < tp; ++t) {
      const float* s = all_stats + (t * rows + n) * 3;
      sum += static_cast<double>(s[1]) * std::exp(static_cast<double>(s[0]) - row_max);
      target_logit += s[2];
    }
    lse[n] = row_max + static_cast<float>(std::log(sum));
    const float weight = mask ? mask[n] : 1.0f;
    const bool ignored = targets[n] == ignore_index || weight == 0.0f;
    losses[n] = ignored ? 0.0f : (lse[n] - static_cast<float>(target_logit)) * weight;
  }
}

void vocab_parallel_cross_entropy(const BlockContext& ctx, const Tensor& logits,
                                  const Tensor& targets, const Tensor& loss_mask,
                                  const Tensor& losses, const Tensor* dlogits, float grad_scale) {
  Backend& backend = *ctx.backend;
  VocabParallelScratch& scratch = *ctx.vocab_parallel;
  const int64_t rows = logits.shape[0];
  const int tp = ctx.tp.size;
  const Tensor stats = leading_rows(scratch.stats, rows, 3);
  backend.cross_entropy_shard_stats(logits, targets, kIgnoreIndex, ctx.vocab_begin, stats);
  const Tensor all_stats = scratch.all_stats.flat(0, tp * rows * 3);
  ctx.tp.ops->all_gather(stats.view(Shape{rows * 3}), all_stats);
  backend.copy_to_host(scratch.host_stats.data(), all_stats);
  backend.copy_to_host(scratch.host_targets.data(), targets);
  const bool masked = loss_mask.defined();
  if (masked) backend.copy_to_host(scratch.host_mask.data(), loss_mask);
  combine_cross_entropy_stats(scratch.host_stats.data(), tp, rows, scratch.host_targets.data(),
                              masked ? scratch.host_mask.data() : nullptr, kIgnoreIndex,
                              scratch.host_losses.data(), scratch.host_lse.data());
  backend.copy_from_host(losses, scratch.host_losses.data());
  if (!dlogits) return;
  const Tensor lse = scratch.lse.flat(0, rows);
  backend.copy_from_host(lse, scratch.host_lse.data());
  backend.cross_entropy_shard_backward(logits, targets, masked ? &loss_mask : nullptr,
                                       kIgnoreIndex, ctx.vocab_begin, lse, *dlogits, grad_scale);
}

}  // namespace anvil
