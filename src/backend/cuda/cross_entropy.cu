// Fused softmax cross-entropy, one block per row of (N, V) logits, streamed over V in two
// passes (no (N, V) temporary): pass 1 keeps a per-thread online max and a double sum of
// exp(x - max) rescaled when the max grows, then the block combines them into the row's max
// and log-sum-exp; pass 2 writes dlogits = (softmax - onehot) * mask * grad_scale. The target
// logit is read and the loss written before a barrier that precedes pass 2, so dlogits may
// alias logits. Ignored rows (target == ignore_index or mask 0) get loss 0 and zero gradient,
// as do rows whose target lies outside the vocabulary (never read: the host checks targets).
// The vocabulary-parallel halves reuse pass 1 for a shard's (max, sum) statistics and write a
// shard's dlogits from the full row's lse, each element read and written by one thread (so
// aliasing needs no barrier).
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

constexpr int kRowBlock = 512;

// Sets row_max and sum = sum of exp(x - row_max) (in double) over logits[offset, offset +
// vocab) for every thread of the block; an empty row gives (-inf, 0).
__device__ void row_max_and_sum(ConstArray logits, int64_t offset, int64_t vocab,
                                float& row_max, double& sum) {
  float thread_max = -INFINITY;
  double thread_sum = 0.0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = load_float(logits, offset + j);
    if (x > thread_max) {
      thread_sum = thread_sum * static_cast<double>(expf(thread_max - x)) + 1.0;
      thread_max = x;
    } else if (thread_max != -INFINITY) {
      thread_sum += static_cast<double>(expf(x - thread_max));
    }
  }
  row_max = block_max(thread_max);
  const double scaled =
      thread_max == -INFINITY ? 0.0 : thread_sum * static_cast<double>(expf(thread_max - row_max));
  sum = block_sum(scaled);
}

__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_kernel(ConstArray logits, const int32_t* targets, const float* loss_mask,
                         int32_t ignore_index, float* losses, MutableArray dlogits,
                         float grad_scale, int64_t vocab) {
  const int64_t row = blockIdx.x;
  const int64_t offset = row * vocab;
  const int32_t target = targets[row];
  const float mask = loss_mask ? loss_mask[row] : 1.0f;
  // A target outside [0, vocab) counts as ignored: the host checks targets before upload, and
  // a kernel never reads outside its row.
  if (target == ignore_index || target < 0 || target >= vocab || mask == 0.0f) {
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (dlogits.data)
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
        store_float(dlogits, offset + j, 0.0f);
    return;
  }
  float row_max;
  double sum;
  row_max_and_sum(logits, offset, vocab, row_max, sum);
  const float log_sum = static_cast<float>(log(sum));
  if (threadIdx.x == 0) {
    const float target_logp = (load_float(logits, offset + target) - row_max) - log_sum;
    losses[row] = -target_logp * mask;
  }
  if (!dlogits.data) return;
  __syncthreads();  // the target logit is read before dlogits (maybe aliasing it) is written
  const float weight = mask * grad_scale;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float softmax = expf((load_float(logits, offset + j) - row_max) - log_sum);
    store_float(dlogits, offset + j, (softmax - (j == target ? 1.0f : 0.0f)) * weight);
  }
}

__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_shard_stats_kernel(ConstArray logits, const int32_t* targets,
                                     int32_t ignore_index, int64_t vocab_begin, float* stats,
                                     int64_t vocab) {
  const int64_t row = blockIdx.x;
  const int64_t offset = row * vocab;
  float row_max;
  double sum;
  row_max_and_sum(logits, offset, vocab, row_max, sum);
  if (threadIdx.x != 0) return;
  const int32_t target = targets[row];
  const int64_t local = static_cast<int64_t>(target) - vocab_begin;
  const bool owned = target != ignore_index && local >= 0 && local < vocab;
  stats[row * 3 + 0] = row_max;
  stats[row * 3 + 1] = static_cast<float>(sum);
  stats[row * 3 + 2] = owned ? load_float(logits, offset + local) : 0.0f;
}

__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_shard_backward_kernel(ConstArray logits, const int32_t* targets,
                                        const float* loss_mask, int32_t ignore_index,
                                        int64_t vocab_begin, const float* lse,
                                        MutableArray dlogits, float grad_scale, int64_t vocab) {
  const int64_t row = blockIdx.x;
  const int64_t offset = row * vocab;
  const int32_t target = targets[row];
  const float mask = loss_mask ? loss_mask[row] : 1.0f;
  if (target == ignore_index || target < 0 || mask == 0.0f) {  // a negative one counts as ignored
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      store_float(dlogits, offset + j, 0.0f);
    return;
  }
  const int64_t local = static_cast<int64_t>(target) - vocab_begin;
  const float row_lse = lse[row];
  const float weight = mask * grad_scale;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float softmax = expf(load_float(logits, offset + j) - row_lse);
    store_float(dlogits, offset + j, (softmax - (j == local ? 1.0f : 0.0f)) * weight);
  }
}

}  // namespace

void launch_cross_entropy(ConstArray logits, const int32_t* targets, const float* loss_mask,
                          int32_t ignore_index, float* losses, MutableArray dlogits,
                          float grad_scale, int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0, stream>>>(
      logits, targets, loss_mask, ignore_index, losses, dlogits, grad_scale, vocab);
}

void launch_cross_entropy_shard_stats(ConstArray logits, const int32_t* targets,
                                      int32_t ignore_index, int64_t vocab_begin, float* stats,
                                      int64_t rows, int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_shard_stats_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0, stream>>>(
      logits, targets, ignore_index, vocab_begin, stats, vocab);
}

void launch_cross_entropy_shard_backward(ConstArray logits, const int32_t* targets,
                                         const float* loss_mask, int32_t ignore_index,
                                         int64_t vocab_begin, const float* lse,
                                         MutableArray dlogits, float grad_scale, int64_t rows,
                                         int64_t vocab, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_shard_backward_kernel<<<static_cast<unsigned>(rows), kRowBlock, 0, stream>>>(
      logits, targets, loss_mask, ignore_index, vocab_begin, lse, dlogits, grad_scale, vocab);
}

}  // namespace anvil::cuda
