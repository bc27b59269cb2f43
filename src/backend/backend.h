// The Backend interface: memory plus one virtual method per op the Llama family needs.
// Every op takes Tensor views that live on this backend's device. Conventions:
//   - activations are row-major; "(N, C)" means N rows of C; (B, T, H, D) is batch, time,
//     heads, head_dim, i.e. exactly the output of a projection viewed per head.
//   - activation dtypes are f32 or bf16; statistics, losses, logsumexp and gradients of
//     parameters are always f32; arithmetic is done in f32 whatever the storage dtype.
//   - backward outputs say whether they are overwritten (=) or accumulated (+=).
// A backend that lacks an op throws "[<name>] op <op> is not implemented"; nothing falls back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/attention_mask.h"
#include "core/buffer.h"
#include "core/tensor.h"

namespace anvil {

// RoPE in the Hugging Face rotate-half layout: pairs (i, i + D/2) rotate by pos * inv_freq[i].
struct RopeParams {
  float theta = 10000.0f;
  // Llama 3.1 "llama3" frequency scaling; off when factor == 0.
  float scaling_factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

// The attention mask and geometry of one call. Positions are absolute: query row i sits at
// position q_offset + i and key row s at k_offset + s, and every mask compares positions
// (backend/attention_mask.h has the rule).
struct AttentionParams {
  bool causal = true;
  // Sliding window: a query at t sees keys in (t - window, t]; 0 disables it.
  int window = 0;
  // Sparse segment pattern (strided or lines; dense by default), its segment length in
  // positions and the strided pattern's stride; and global sink keys [0, sinks).
  SparsePattern pattern = SparsePattern::dense;
  int segment = 0;
  int stride = 0;
  int sinks = 0;
  // Optional (B, L) i32 document ids indexed by absolute position, L >= the last query and
  // key positions + 1: queries attend only to keys of the same document.
  const Tensor* doc_ids = nullptr;
  // Score scale; 0 means 1/sqrt(head_dim).
  float scale = 0.0f;
  // Absolute position of query row 0 (new queries after the cached keys when decoding).
  int q_offset = 0;
  // Absolute position of key row 0: a block of keys from elsewhere in the sequence (context
  // parallelism's ring passes such blocks). Keys outside [k_offset, k_offset + Tk) do not
  // take part, whatever the mask says.
  int k_offset = 0;

  // Returns the position-level part of the mask.
  MaskRule mask_rule() const {
    return MaskRule{causal, window, pattern, segment, stride, sinks};
  }
};

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; pass 0 for tensors exempt from decay
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (clipping, unscaling)
};

class Backend : public Allocator {
 public:
  ~Backend() override = default;

  // Returns the backend's name as given to --backend ("cpu", "cpu-ref", "cuda").
  virtual std::string name() const = 0;

  // ---- memory -------------------------------------------------------------------------
  // allocate(bytes, category) and memory_snapshot() come from Allocator: every allocation of
  // device memory, the backend's own scratch included, is counted by category there.
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;
  // Copies between two tensors of this backend with equal byte size.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill_zero(const Tensor& t) = 0;
  virtual void synchronize() = 0;

  // ---- ops ------------------------------------------------------------------------------
  // c = alpha * op(a) @ op(b) + beta * c, op = transpose when asked. a, b: (M,K)/(K,M) and
  // (K,N)/(N,K) or batched (P, ., .) with b optionally shared (rank 2). a and b share a dtype
  // (f32 or bf16); c is f32 or bf16; accumulation is f32.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                      bool transpose_b, float alpha = 1.0f, float beta = 0.0f) = 0;

  // out (N, C) = table (V, C)[ids (N) i32]. Throws for an id outside [0, V).
  virtual void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) = 0;
  // dtable (V, C) f32 += scatter of dout (N, C) by ids.
  virtual void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) = 0;
  // Vocabulary-parallel embedding (tensor parallelism): table (Vs, C) holds rows
  // [begin, begin + Vs) of the full table. out (N, C) = table[id - begin] for ids inside the
  // shard, 0 for every other id. Throws for a negative id.
  virtual void embedding_shard_forward(const Tensor& ids, const Tensor& table, const Tensor& out,
                                       int64_t begin) = 0;
  // dtable (Vs, C) f32 += scatter of the rows of dout (N, C) whose ids lie inside the shard.
  virtual void embedding_shard_backward(const Tensor& ids, const Tensor& dout,
                                        const Tensor& dtable, int64_t begin) = 0;

  // out (N, C) = x / rms(x) * weight (C); rstd (N) f32 = 1/sqrt(mean(x^2) + eps).
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out,
                               const Tensor& rstd, float eps) = 0;
  // dx (N, C) +=; dweight (C) f32 +=.
  virtual void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                const Tensor& rstd, const Tensor& dx, const Tensor& dweight) = 0;

  // out (B, T, H, D) = rope(x) with positions (B, T) i32; out may alias x.
  virtual void rope_forward(const Tensor& x, const Tensor& out, const Tensor& positions,
                            const RopeParams& params) = 0;
  // dx (B, T, H, D) = inverse rotation of dout; dx may alias dout.
  virtual void rope_backward(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                             const RopeParams& params) = 0;

  // out (B, Tq, Hq, D) = softmax(q k^T * scale + mask) v with Hq a multiple of Hkv (GQA:
  // query head h uses kv head h / (Hq / Hkv)); k, v (B, Tk, Hkv, D) (Tk == Tq in training;
  // params.q_offset places new queries after cached keys when decoding, params.k_offset places
  // a block of keys); lse (B, Hq, Tq) f32 = logsumexp of the scores. A row with no visible key
  // (a window/doc mask excluding itself, or a key block entirely hidden from it) gets out = 0
  // and lse = -inf.
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse,
                                 const AttentionParams& params) = 0;
  // dq (B, Tq, Hq, D) =, dk and dv (B, Tk, Hkv, D) = (shapes and offsets as in forward). out
  // and lse may be the merged results of several key blocks (attention_merge): each block's
  // backward then gives that block's share of dq and its own dk, dv.
  virtual void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                  const AttentionParams& params) = 0;
  // Folds the attention of the same queries over another block of keys into a running result:
  // lse' = log(exp(lse) + exp(part_lse)), out = out exp(lse - lse') + part_out
  // exp(part_lse - lse'), lse = lse'. out, part_out (B, Tq, Hq, D) f32 or bf16 of one dtype;
  // lse, part_lse (B, Hq, Tq) f32. Rows where both lse are -inf keep out = 0, lse = -inf.
  virtual void attention_merge(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                               const Tensor& part_lse) = 0;

  // out (N, F) = silu(gate) * up.
  virtual void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  // dgate (N, F) =, dup (N, F) =.
  virtual void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                               const Tensor& dgate, const Tensor& dup) = 0;

  // out = a + b (same shape; out may alias either).
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // x *= alpha.
  virtual void scale(const Tensor& x, float alpha) = 0;
  // y += alpha * x (x and y may differ in dtype; y is read and written in its own dtype).
  virtual void axpy(float alpha, const Tensor& x, const Tensor& y) = 0;
  // dst = src converted to dst's dtype (f32 <-> bf16 <-> f16), round to nearest even.
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;

  // Fused softmax cross-entropy over logits (N, V). targets (N) i32; a target equal to
  // ignore_index, or a row whose loss_mask (N) f32 is 0, contributes no loss and no gradient.
  // losses (N) f32 = per-row loss (0 for ignored rows). When dlogits is defined (it may alias
  // logits): dlogits (N, V) = (softmax - onehot) * mask * grad_scale.
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* loss_mask,
                             int ignore_index, const Tensor& losses, const Tensor* dlogits,
                             float grad_scale) = 0;
  // Vocabulary-parallel cross-entropy, first half: logits (N, Vs) f32 or bf16 hold columns
  // [begin, begin + Vs) of the full logits. stats (N, 3) f32 per row: the row maximum m, the sum
  // of exp(x - m) over the shard (accumulated in double, rounded once), and the logit of the row's
  // target when the target lies inside the shard (0 otherwise, and 0 for target == ignore_index).
  virtual void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets,
                                         int ignore_index, int64_t begin,
                                         const Tensor& stats) = 0;
  // Second half, once the caller has combined the shards' stats into each full row's logsumexp
  // lse (N) f32: dlogits (N, Vs) = (exp(x - lse) - onehot(target - begin)) * mask * grad_scale,
  // where a row whose target is ignore_index or whose loss_mask (N) f32 is 0 gets 0. dlogits may
  // alias logits (f32 or bf16, like cross_entropy's dlogits).
  virtual void cross_entropy_shard_backward(const Tensor& logits, const Tensor& targets,
                                            const Tensor* loss_mask, int ignore_index,
                                            int64_t begin, const Tensor& lse,
                                            const Tensor& dlogits, float grad_scale) = 0;

  // One AdamW step on a flat f32 parameter with its f32 gradient and moments (all (n)).
  // When param_copy is given (bf16 or f32, (n)), it receives the updated parameter.
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const AdamWParams& params,
                          const Tensor* param_copy) = 0;

  // out = x * keep(i) / (1 - p) with keep(i) = (dropout_hash(seed, i) >> 40) >= p * 2^24, i the
  // flat element index; out may alias x. The mask depends only on (seed, i), so the backward
  // pass re-creates it by calling the op on the gradient with the same seed. p in [0, 1).
  // x and out are f32 or bf16 (core/counter_hash.h has the formula).
  virtual void dropout(const Tensor& x, const Tensor& out, float p, uint64_t seed) = 0;

  // Returns sum(x^2) accumulated in double precision (any float dtype).
  virtual double sum_squares(const Tensor& x) = 0;
  // Returns false when any element is NaN or infinite.
  virtual bool all_finite(const Tensor& x) = 0;
};

// Creates a backend by name: "cpu" (optimized), "cpu-ref" (reference loops), "cuda".
// Throws naming the valid choices for an unknown name, or why a known one is unavailable.
std::unique_ptr<Backend> make_backend(const std::string& name);
// Returns the names of the backends compiled into this binary.
std::vector<std::string> compiled_backends();
// Returns one line per compiled backend describing what it sees (for `anvil info`).
std::vector<std::string> describe_backends();

}  // namespace anvil
