// The optimized CPU kernels, one table of function pointers per instruction set (generic C++
// vectors, AVX2 + FMA, AVX-512). Every kernel is serial over a range (elements, rows, columns
// or one attention task); the ops in ops_*.cpp validate arguments, split the work across
// OpenMP threads and pick the table once per backend (isa.h), so the ISA-specific translation
// units hold only arithmetic. Storage types inside kernels: f32 as float, bf16 as its uint16_t
// bits, f16 as simd.inc's Half (both widened exactly, stored with round-to-nearest-even).
#pragma once

#include <cstdint>

#include "backend/attention_mask.h"
#include "backend/op_rules.h"
#include "core/dtype.h"

namespace anvil::cpu_opt {

struct RmsnormArgs {
  const void* x;      // (N, C), x_dtype
  const void* weight; // (C), weight_dtype
  void* out;          // (N, C), out_dtype (forward)
  float* rstd;        // (N)
  const void* dout;   // (N, C), dout_dtype (backward)
  void* dx;           // (N, C), dx_dtype, += (backward)
  DType x_dtype, weight_dtype, out_dtype, dout_dtype, dx_dtype;
  int64_t C;
  float eps;
};

struct RopeArgs {
  const void* in;  // (B*T, H, D), in_dtype
  void* out;       // same shape, out_dtype; may alias in
  DType in_dtype, out_dtype;
  const int32_t* positions;  // (B*T)
  const float* cos_table;    // (max_position, D/2): cos(pos * inv_freq[i]) as f32
  const float* sin_table;
  int64_t H, D;
  float sin_sign;  // +1 forward, -1 backward (inverse rotation)
};

struct CrossEntropyArgs {
  const void* logits;  // (N, V), logits_dtype
  const int32_t* targets;
  const float* loss_mask;  // (N) or null
  float* losses;           // (N)
  void* dlogits;           // (N, V) dlogits_dtype or null; may alias logits
  DType logits_dtype, dlogits_dtype;
  int64_t V;
  int ignore_index;
  float grad_scale;
};

// The vocabulary-parallel halves of the cross-entropy over a shard of columns
// [vocab_begin, vocab_begin + Vs) of the full logits; targets are full-vocabulary ids.
struct CrossEntropyShardArgs {
  const void* logits;  // (N, Vs), logits_dtype
  const int32_t* targets;
  float* stats;            // (N, 3): max, sum of exp(x - max), target logit (stats)
  const float* loss_mask;  // (N) or null (backward)
  const float* lse;        // (N), the full rows' logsumexp (backward)
  void* dlogits;           // (N, Vs), dlogits_dtype; may alias logits (backward)
  DType logits_dtype, dlogits_dtype;
  int64_t Vs, vocab_begin;
  int ignore_index;
  float grad_scale;
};

// The table rows [vocab_begin, vocab_begin + V) that dtable holds: the whole table when
// vocab_begin is 0 and V its row count, a vocabulary shard otherwise (other ids are skipped).
struct EmbeddingBackwardArgs {
  const int32_t* ids;  // (N)
  const void* dout;    // (N, C), dout_dtype
  float* dtable;       // (V, C), +=
  DType dout_dtype;
  int64_t N, C;
  int64_t vocab_begin, V;
};

// One attention call. Tensors are (B, T, H, D) row-major; q, out, dout, dq have Tq rows and
// Hq heads, k, v, dk, dv have Tk rows and Hkv heads. Forward tasks are (b, kv head, query
// tile) and write out and lse of the kv head's query heads; backward tasks are (b, kv head)
// and own dk, dv of that head and dq of its query heads.
struct AttentionArgs {
  const void *q, *k, *v;
  void* out;    // forward output; read by backward
  float* lse;   // (B, Hq, Tq)
  const void* dout;
  void *dq, *dk, *dv;
  DType q_dtype, k_dtype, v_dtype, out_dtype, dout_dtype, dq_dtype, dk_dtype, dv_dtype;
  const int32_t* doc_ids;  // (B, doc_len) by absolute position, or null
  int64_t doc_len;
  int64_t B, Tq, Tk, Hq, Hkv, D;
  int64_t q_offset;  // absolute position of query row 0
  int64_t k_offset;  // absolute position of key row 0
  MaskRule rule;
  float scale;
};

// Query and key tile sizes of the attention kernels (multiples of every ISA's lane count).
inline constexpr int64_t kAttentionQueryTile = 64;
inline constexpr int64_t kAttentionKeyTile = 64;

// Returns D rounded up to a multiple of 16 floats (the widest vector): the padded row length
// of the attention kernels' f32 copies.
inline int64_t attention_padded_dim(int64_t D) { return (D + 15) / 16 * 16; }
// Returns the floats of scratch one forward task needs.
int64_t attention_forward_scratch_floats(const AttentionArgs& args);
// Returns the floats of scratch one backward task needs.
int64_t attention_backward_scratch_floats(const AttentionArgs& args);

struct Kernels {
  const char* isa_name;
  // dst[0, n) = src converted between f32, bf16 and f16 (or copied).
  void (*convert)(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
  // out = a + b; out may alias a or b.
  void (*add)(const void* a, DType a_dtype, const void* b, DType b_dtype, void* out,
              DType out_dtype, int64_t n);
  // x *= alpha.
  void (*scale)(void* x, DType dtype, float alpha, int64_t n);
  // y += alpha * x.
  void (*axpy)(float alpha, const void* x, DType x_dtype, void* y, DType y_dtype, int64_t n);
  // Returns sum(x^2), each square and the sum in double.
  double (*sum_squares)(const void* x, DType dtype, int64_t n);
  // Returns false when an element is NaN or infinite.
  bool (*all_finite)(const void* x, DType dtype, int64_t n);
  // out = silu(gate) * up; all tensors share one dtype.
  void (*swiglu_forward)(const void* gate, const void* up, void* out, DType dtype, int64_t n);
  // dgate =, dup =; all tensors share one dtype.
  void (*swiglu_backward)(const void* dout, const void* gate, const void* up, void* dgate,
                          void* dup, DType dtype, int64_t n);
  // One AdamW step over n elements; copy (copy_dtype) receives the new parameter when non-null.
  void (*adamw)(float* param, const float* grad, float* m, float* v,
                const AdamWScalars& coefficients, void* copy, DType copy_dtype, int64_t n);
  // Rows [begin, end) of rmsnorm forward: out, rstd.
  void (*rmsnorm_forward)(const RmsnormArgs& args, int64_t begin, int64_t end);
  // Rows [begin, end) of rmsnorm backward: dx +=, dweight_partial (C) += this range's share.
  void (*rmsnorm_backward)(const RmsnormArgs& args, float* dweight_partial, int64_t begin,
                           int64_t end);
  // Rows [begin, end) of the (B*T) rows of a rotation.
  void (*rope)(const RopeArgs& args, int64_t begin, int64_t end);
  // Rows [begin, end) of the fused softmax cross-entropy; row_scratch holds V floats.
  void (*cross_entropy)(const CrossEntropyArgs& args, float* row_scratch, int64_t begin,
                        int64_t end);
  // Rows [begin, end) of a vocabulary shard's cross-entropy statistics.
  void (*cross_entropy_shard_stats)(const CrossEntropyShardArgs& args, int64_t begin,
                                    int64_t end);
  // Rows [begin, end) of a vocabulary shard's dlogits from the full rows' lse.
  void (*cross_entropy_shard_backward)(const CrossEntropyShardArgs& args, int64_t begin,
                                       int64_t end);
  // out[0, n) = dropout of x[0, n), elements numbered from `first` (their flat index in the
  // whole tensor): kept (x * keep_scale) where (dropout_hash(seed, index) >> 40) >= threshold.
  void (*dropout)(const void* x, DType x_dtype, void* out, DType out_dtype, int64_t n,
                  uint64_t first, uint64_t seed, uint64_t threshold, float keep_scale);
  // Columns [begin, end) of the embedding scatter-add, rows in order.
  void (*embedding_backward)(const EmbeddingBackwardArgs& args, int64_t begin, int64_t end);
  // Forward task `task` in [0, B * Hkv * query tiles), with its own scratch.
  void (*attention_forward)(const AttentionArgs& args, int64_t task, float* scratch);
  // Backward task `task` in [0, B * Hkv), with its own scratch.
  void (*attention_backward)(const AttentionArgs& args, int64_t task, float* scratch);
};

// Attention on bf16 q, k, v (and dout) with AVX512-BF16 pair dot products (vdpbf16ps): the
// same tasks and scratch protocol as Kernels::attention_*, with P and dS rounded to bf16
// before their products; scores, softmax statistics and all accumulation stay f32.
struct Bf16AttentionKernels {
  // Return the floats of scratch one forward / backward task needs.
  int64_t (*forward_scratch_floats)(const AttentionArgs& args);
  int64_t (*backward_scratch_floats)(const AttentionArgs& args);
  void (*forward)(const AttentionArgs& args, int64_t task, float* scratch);
  void (*backward)(const AttentionArgs& args, int64_t task, float* scratch);
};

// The tables; avx2/avx512 exist only on x86-64 builds and may be used only when the CPU has
// the features (isa.h checks; the bf16 attention kernels also need AVX512-BF16).
const Kernels& generic_kernels();
#if defined(__x86_64__)
const Kernels& avx2_kernels();
const Kernels& avx512_kernels();
const Bf16AttentionKernels& avx512_bf16_attention_kernels();
#endif

}  // namespace anvil::cpu_opt
