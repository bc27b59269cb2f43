// Reference fused softmax cross-entropy over logits (N, V). Each row's log-softmax is the
// stable f32 form PyTorch uses, logp = (x - max) - log(sum exp(x - max)), with the sum in
// double. A row whose target is ignore_index or whose loss_mask is 0 gets loss 0 and a zero
// gradient. The loss is weighted by the mask, so dlogits is exactly grad_scale times the
// gradient of sum(losses). A row is fully read before its dlogits are written, so dlogits may
// alias logits.
// The vocabulary-parallel pair splits the same computation at the logsumexp: each shard of
// columns reports (max, sum of exp(x - max), target logit), the caller combines the shards
// into lse, and the backward writes exp(x - lse) - onehot for its columns.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"

namespace anvil::cpu_ref {

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                   int ignore_index, const Tensor& losses, const Tensor* dlogits,
                   float grad_scale) {
  const int64_t N = logits.shape[0], V = logits.shape[1];
  const int32_t* target = targets.i32();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float mask = loss_mask ? loss_mask->f32()[n] : 1.0f;
    // A target outside [0, V) (checked by the caller where it can be) counts as ignored.
    if (target[n] == ignore_index || target[n] < 0 || target[n] >= V || mask == 0.0f) {
      losses.f32()[n] = 0.0f;
      if (dlogits) {
        const std::vector<float> zeros(static_cast<size_t>(V), 0.0f);
        write_floats(*dlogits, n * V, V, zeros.data());
      }
      continue;
    }
    std::vector<float> row = read_floats(logits, n * V, V);
    const float row_max = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (float x : row) sum += std::exp(static_cast<double>(x - row_max));
    const float log_sum = static_cast<float>(std::log(sum));
    const float target_logp = (row[target[n]] - row_max) - log_sum;
    losses.f32()[n] = -target_logp * mask;
    if (!dlogits) continue;
    const float weight = mask * grad_scale;
    for (int64_t j = 0; j < V; ++j) {
      const float softmax = std::exp((row[j] - row_max) - log_sum);
      row[j] = (softmax - (j == target[n] ? 1.0f : 0.0f)) * weight;
    }
    write_floats(*dlogits, n * V, V, row.data());
  }
}


void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, int ignore_index,
                               int64_t begin, const Tensor& stats) {
  const int64_t N = logits.shape[0], Vs = logits.shape[1];
  const int32_t* target = targets.i32();
  float* out = stats.f32();
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<float> row = read_floats(logits, n * Vs, Vs);
    // An empty shard reports (-inf, 0), which the combination weights by exp(-inf) = 0.
    float row_max = -std::numeric_limits<float>::infinity();
    for (float x : row) row_max = std::max(row_max, x);
    double sum = 0.0;
    for (float x : row) sum += std::exp(static_cast<double>(x - row_max));
    const int64_t local = static_cast<int64_t>(target[n]) - begin;
    const bool owned = target[n] != ignore_index && local >= 0 && local < Vs;
    out[n * 3 + 0] = row_max;
    out[n * 3 + 1] = static_cast<float>(sum);
    out[n * 3 + 2] = owned ? row[local] : 0.0f;
  }
}

void cross_entropy_shard_backward(const Tensor& logits, const Tensor& targets,
                                  const Tensor* loss_mask, int ignore_index, int64_t begin,
                                  const Tensor& lse, const Tensor& dlogits, float grad_scale) {
  const int64_t N = logits.shape[0], Vs = logits.shape[1];
  const int32_t* target = targets.i32();
  for (int64_t n = 0; n < N; ++n) {
    const float mask = loss_mask ? loss_mask->f32()[n] : 1.0f;
    std::vector<float> row = read_floats(logits, n * Vs, Vs);
    // A negative target (checked by the caller where it can be) counts as ignored.
    if (target[n] == ignore_index || target[n] < 0 || mask == 0.0f) {
      std::fill(row.begin(), row.end(), 0.0f);
    } else {
      const float row_lse = lse.f32()[n];
      const int64_t local = static_cast<int64_t>(target[n]) - begin;
      const float weight = mask * grad_scale;
      for (int64_t j = 0; j < Vs; ++j)
        row[j] = (std::exp(row[j] - row_lse) - (j == local ? 1.0f : 0.0f)) * weight;
    }
    write_floats(dlogits, n * Vs, Vs, row.data());
  }
}

}  // namespace anvil::cpu_ref
