// Kernel launchers of the CUDA backend, one group per op, each implemented in <op>.cu. They
// take raw device pointers with their storage dtype and sizes already validated by
// CudaBackend (cuda_backend.cpp), enqueue on `stream` and return without synchronizing; the
// caller checks the launch with CUDA_CHECK_LAUNCH. Conventions (=, +=, aliasing, rounding)
// are those of backend/backend.h and the CPU reference. No CUDA device code in this header, so
// host .cpp files include it as is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernel_plan.h"
#include "backend/op_rules.h"
#include "core/dtype.h"

namespace anvil::cuda {

// A read-only device array of a float storage dtype (f32, bf16 or f16).
struct ConstArray {
  const void* data;
  DType dtype;
};
// A writable device array of a float storage dtype.
struct MutableArray {
  void* data;
  DType dtype;
};

// out (N, C) = table (Vs, C)[id - vocab_begin] for ids in [vocab_begin, vocab_begin +
// vocab_rows), 0 for other ids; the whole-table op passes vocab_begin 0 and vocab_rows V.
void launch_embedding_forward(const int32_t* ids, int64_t rows, ConstArray table,
                              int64_t vocab_begin, int64_t vocab_rows, int64_t cols,
                              MutableArray out, cudaStream_t stream);
// dtable (Vs, C) f32 += dout rows by ids inside the shard (as launch_embedding_forward's),
// each table row summed in token order by one block.
void launch_embedding_backward(const int32_t* ids, int64_t rows, ConstArray dout, int64_t cols,
                               int64_t vocab_begin, int64_t vocab_rows, float* dtable,
                               cudaStream_t stream);

// out = weight * (x * rstd), rstd (N) = 1/sqrt(mean(x^2) + eps).
void launch_rmsnorm_forward(ConstArray x, ConstArray weight, MutableArray out, float* rstd,
                            int64_t rows, int64_t cols, float eps, cudaStream_t stream);
// sum = a + b (rounded to sum's dtype; sum may alias a or b), then rmsnorm of sum, one pass.
void launch_add_rmsnorm_forward(ConstArray a, ConstArray b, MutableArray sum, ConstArray weight,
                                MutableArray out, float* rstd, int64_t rows, int64_t cols,
                                float eps, cudaStream_t stream);
// dx += ..., dweight += ... (see cpu reference) in one launch; dx_copy.data (may be null)
// receives the updated dx in its dtype. `plan` is plan_rmsnorm_backward(rows, cols, SMs);
// `workspace` holds plan.workspace_bytes(); `counters` holds plan.groups + 1 u32 that are
// zero on entry (and are again when the kernel ends).
void launch_rmsnorm_backward(ConstArray dout, ConstArray x, ConstArray weight, const float* rstd,
                             MutableArray dx, MutableArray dx_copy, float* dweight, int64_t rows,
                             int64_t cols, const RmsnormBackwardPlan& plan, void* workspace,
                             unsigned* counters, cudaStream_t stream);

// Rotates (B*T, H, D) rows of `in` into `out` by positions (B*T) * inv_freq (D/2);
// direction -1 applies the inverse rotation. out may alias in.
void launch_rope(ConstArray in, MutableArray out, const int32_t* positions,
                 const float* inv_freq, int64_t tokens, int64_t heads, int64_t head_dim,
                 float direction, cudaStream_t stream);

// out = silu(gate) * up over n elements.
void launch_swiglu_forward(ConstArray gate, ConstArray up, MutableArray out, int64_t n,
                           cudaStream_t stream);
// dgate =, dup = over n elements.
void launch_swiglu_backward(ConstArray dout, ConstArray gate, ConstArray up, MutableArray dgate,
                            MutableArray dup, int64_t n, cudaStream_t stream);

// Folds part_out/part_lse into out/lse (Backend::attention_merge); out (B, Tq, Hq, D), lse
// (B, Hq, Tq).
void launch_attention_merge(MutableArray out, float* lse, ConstArray part_out,
                            const float* part_lse, int64_t B, int64_t Tq, int64_t Hq, int64_t D,
                            cudaStream_t stream);

// out = a + b; x *= alpha; y += alpha * x; dst = src (all over n elements, aliasing allowed).
void launch_add(ConstArray a, ConstArray b, MutableArray out, int64_t n, cudaStream_t stream);
void launch_scale(MutableArray x, float alpha, int64_t n, cudaStream_t stream);
void launch_axpy(float alpha, ConstArray x, MutableArray y, int64_t n, cudaStream_t stream);
void launch_cast(ConstArray src, MutableArray dst, int64_t n, cudaStream_t stream);

// Fused softmax cross-entropy, one block per row; dlogits.data may be null or alias logits. A
// target outside [0, vocab) counts as ignored (the host checks targets before upload).
void launch_cross_entropy(ConstArray logits, const int32_t* targets, const float* loss_mask,
                          int32_t ignore_index, float* losses, MutableArray dlogits,
                          float grad_scale, int64_t rows, int64_t vocab, cudaStream_t stream);
// Vocabulary-parallel halves over a shard of columns [vocab_begin, vocab_begin + vocab) with
// full-vocabulary targets, one block per row: stats (N, 3) = (max, double sum of
// exp(x - max) rounded once, target logit or 0), and dlogits = (exp(x - lse) - onehot) * mask
// * grad_scale (0 for ignored rows; may alias logits).
void launch_cross_entropy_shard_stats(ConstArray logits, const int32_t* targets,
                                      int32_t ignore_index, int64_t vocab_begin, float* stats,
                                      int64_t rows, int64_t vocab, cudaStream_t stream);
void launch_cross_entropy_shard_backward(ConstArray logits, const int32_t* targets,
                                         const float* loss_mask, int32_t ignore_index,
                                         int64_t vocab_begin, const float* lse,
                                         MutableArray dlogits, float grad_scale, int64_t rows,
                                         int64_t vocab, cudaStream_t stream);

// One AdamW step over every set of `launch` (plan_adamw_launches).
void launch_adamw(const AdamWLaunch& launch, cudaStream_t stream);

// out = x * keep(i) / (1 - p) with core/counter_hash.h's mask; out may alias x.
void launch_dropout(ConstArray x, MutableArray out, float p, uint64_t seed, int64_t n,
                    cudaStream_t stream);

// Returns the number of doubles of scratch launch_sum_squares needs.
int64_t sum_squares_scratch_count();
// Writes sum(x^2) (double, fixed reduction order: deterministic) into *result (device).
void launch_sum_squares(ConstArray x, int64_t n, double* scratch, double* result,
                        cudaStream_t stream);
// Writes the sum of x's n f32 elements, added in index order in double, into *result (device).
void launch_sum_to_double(const float* x, int64_t n, double* result, cudaStream_t stream);
// Sets *nonfinite (device int, zeroed by the caller) to 1 when any element is NaN or inf.
void launch_find_nonfinite(ConstArray x, int64_t n, int* nonfinite, cudaStream_t stream);

// Adds the squares of x's n elements to the digit counters of core/exact_square_sum.h
// (kExactCounterCount device u64, 8-byte aligned) with integer atomics: deterministic.
void launch_accumulate_exact_squares(const float* x, int64_t n, uint64_t* counters,
                                     cudaStream_t stream);

}  // namespace anvil::cuda
