// Reference fused softmax cross-entropy over logits (N, V). Each row's log-softmax is the
// stable f32 form PyTorch uses, logp = (x - max) - log(sum exp(x - max)), with the sum in
// double. A row whose target is ignore_index or whose loss_mask is 0 gets loss 0 and a zero
// gradient. The loss is weighted by the mask, so dlogits is exactly grad_scale times the
// gradient of sum(losses). A row is fully read before its dlogits are written, so dlogits may
// alias logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_ref {

void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                   int ignore_index, const Tensor& losses, const Tensor* dlogits,
                   float grad_scale) {
  const char* op = "cross_entropy";
  check_tensor(logits, op, "logits", kActivationDtypes);
  check_rank(logits, op, "logits", 2);
  const int64_t N = logits.shape[0], V = logits.shape[1];
  check_tensor(targets, op, "targets", {DType::i32}, Shape{N});
  if (loss_mask) check_tensor(*loss_mask, op, "loss_mask", {DType::f32}, Shape{N});
  check_tensor(losses, op, "losses", {DType::f32}, Shape{N});
  if (dlogits) check_tensor(*dlogits, op, "dlogits", kActivationDtypes, logits.shape);
  const int32_t* target = targets.i32();
  for (int64_t n = 0; n < N; ++n)
    ANVIL_CHECK(target[n] == ignore_index || (target[n] >= 0 && target[n] < V),
                "[cross_entropy] target {} out of range [0, {}) at row {} (ignore_index is {})",
                target[n], V, n, ignore_index);

#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float mask = loss_mask ? loss_mask->f32()[n] : 1.0f;
    if (target[n] == ignore_index || mask == 0.0f) {
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

}  // namespace anvil::cpu_ref
