// Softmax cross-entropy over (N, V) logits, one block per row, no (N, V) temporary.
// The fused classifier (cross_entropy, the head's loss and dlogits in the compute dtype, in
// place): storage types as template tags, 16-byte packs (vector_io.cuh), two passes over the
// row: pass 1 keeps a per-thread online max and f32 sum of exp(x - max) (rescaled when the
// max grows), the block combines them into the row's max and log-sum-exp; pass 2 writes
// dlogits = (softmax - onehot) * mask * grad_scale. Thread 0 reads the target logit before
// the block reductions, which are barriers before any write, so dlogits may alias logits.
// Ignored rows (target == ignore_index or mask 0) get loss 0 and zero gradient, as do rows
// whose target lies outside the vocabulary (never read: the host checks targets).
// The vocabulary-parallel halves keep their double per-thread sums (stats documented as
// accumulated in double): pass 1 gives a shard's (max, sum) statistics, and the backward
// writes a shard's dlogits from the full row's lse, each element read and written by one
// thread (so aliasing needs no barrier).
#include "backend/cuda/vector_io.cuh"

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

struct ClassifierArgs {
  ConstArray logits;
  const int32_t* targets;
  const float* loss_mask;  // null: every row weighs 1
  int32_t ignore_index;
  float* losses;
  MutableArray dlogits;  // data null: loss only
  float grad_scale;
  int64_t vocab;
  bool vectorized;
};

// Folds one pack into a thread's online (max, sum of exp(x - max)).
__device__ __forceinline__ void online_softmax_pack(const Pack& p, const float (&v)[kPackElements],
                                                    float& thread_max, float& thread_sum) {
  float pack_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPackElements; ++i)
    if (p.holds(i)) pack_max = fmaxf(pack_max, v[i]);
  if (pack_max > thread_max) {
    thread_sum = __fmul_rn(thread_sum, expf(thread_max - pack_max));  // 0 while max was -inf
    thread_max = pack_max;
  }
  if (thread_max == -INFINITY) return;
#pragma unroll
  for (int i = 0; i < kPackElements; ++i)
    if (p.holds(i)) thread_sum = __fadd_rn(thread_sum, expf(v[i] - thread_max));
}

// Writes one pack of dlogits = (softmax - onehot) * weight from its logits.
template <class D>
__device__ __forceinline__ void gradient_pack(const ClassifierArgs& args, const Pack& p,
                                              float (&v)[kPackElements], int64_t column,
                                              int32_t target, float row_max, float log_sum,
                                              float weight) {
#pragma unroll
  for (int i = 0; i < kPackElements; ++i) {
    const float softmax = expf((v[i] - row_max) - log_sum);
    v[i] = (softmax - (column + i == target ? 1.0f : 0.0f)) * weight;
  }
  store_pack<D>(args.dlogits, p, v);
}

// The fused classifier: one block per row, two packs per thread in flight per iteration.
template <class L, class D>
__global__ void __launch_bounds__(kMaxRowThreads) classifier_kernel(ClassifierArgs args) {
  const int64_t row = blockIdx.x, vocab = args.vocab;
  const int64_t row_first = row * vocab;
  const int64_t packs = (vocab + kPackElements - 1) / kPackElements;
  const int64_t t = threadIdx.x, T = blockDim.x;
  const int32_t target = args.targets[row];
  const float mask = args.loss_mask ? args.loss_mask[row] : 1.0f;
  // A target outside [0, vocab) counts as ignored: the host checks targets before upload, and
  // a kernel never reads outside its row.
  if (target == args.ignore_index || target < 0 || target >= vocab || mask == 0.0f) {
    if (t == 0) args.losses[row] = 0.0f;
    if (!args.dlogits.data) return;
    const float zeros[kPackElements] = {};
    for (int64_t j = t; j < packs; j += T)
      store_pack<D>(args.dlogits, row_pack(row_first, vocab, j, args.vectorized), zeros);
    return;
  }
  // Read before any thread writes dlogits (which may alias the logits): the block
  // reductions below are barriers.
  const float target_logit = t == 0 ? load1<L>(args.logits.data, args.logits.dtype,
                                               row_first + target)
                                    : 0.0f;
  float thread_max = -INFINITY, thread_sum = 0.0f;
  for (int64_t j = t; j < packs; j += 2 * T) {
    const Pack p = row_pack(row_first, vocab, j, args.vectorized);
    const bool second = j + T < packs;
    const Pack q = row_pack(row_first, vocab, second ? j + T : j, args.vectorized);
    float a[kPackElements], b[kPackElements];
    load_pack<L>(args.logits, p, a);
    if (second) load_pack<L>(args.logits, q, b);
    online_softmax_pack(p, a, thread_max, thread_sum);
    if (second) online_softmax_pack(q, b, thread_max, thread_sum);
  }
  const float row_max = block_max(thread_max);
  const float scaled =
      thread_max == -INFINITY ? 0.0f : __fmul_rn(thread_sum, expf(thread_max - row_max));
  const float log_sum = logf(block_sum(scaled));
  if (t == 0) args.losses[row] = -((target_logit - row_max) - log_sum) * mask;
  if (!args.dlogits.data) return;
  const float weight = mask * args.grad_scale;
  for (int64_t j = t; j < packs; j += 2 * T) {
    const Pack p = row_pack(row_first, vocab, j, args.vectorized);
    const bool second = j + T < packs;
    const Pack q = row_pack(row_first, vocab, second ? j + T : j, args.vectorized);
    float a[kPackElements], b[kPackElements];
    load_pack<L>(args.logits, p, a);
    if (second) load_pack<L>(args.logits, q, b);
    gradient_pack<D>(args, p, a, j * kPackElements, target, row_max, log_sum, weight);
    if (second)
      gradient_pack<D>(args, q, b, (j + T) * kPackElements, target, row_max, log_sum, weight);
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
  if (rows == 0 || vocab == 0) return;
  const ClassifierArgs args{
      logits, targets, loss_mask, ignore_index, losses, dlogits, grad_scale, vocab,
      rows_vectorized(vocab, {accessed(logits), accessed(dlogits)})};
  void (*kernel)(ClassifierArgs) = classifier_kernel<AnyFloat, AnyFloat>;
  const DType gradient = dlogits.data ? dlogits.dtype : logits.dtype;
  if (logits.dtype == DType::bf16 && gradient == DType::bf16)
    kernel = classifier_kernel<Bf16, Bf16>;
  else if (logits.dtype == DType::f32 && gradient == DType::f32)
    kernel = classifier_kernel<F32, F32>;
  kernel<<<static_cast<unsigned>(rows), row_block_threads(vocab), 0, stream>>>(args);
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
