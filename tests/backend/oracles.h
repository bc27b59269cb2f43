// Double-precision oracles: a second, independent definition of each forward op, written as
// directly from the math as possible and evaluated entirely in double. The driver checks every
// backend's forward against them and differentiates them by finite differences to check every
// backward. The one deliberate f32 step is RoPE's angle (inv_freq, pos * inv_freq, cos, sin),
// which the op defines as PyTorch's f32 computation (see cpu/reference/rope.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace anvil::test::f64 {

using Vec = std::vector<double>;

struct MatmulDims {
  int64_t batches = 1;  // P; 1 for rank-2 operands
  int64_t M = 0, K = 0, N = 0;
  bool transpose_a = false, transpose_b = false;
  bool shared_b = false;  // b is one (., .) matrix for every batch
};

// Returns alpha * op(a) @ op(b) + beta * c0 (c0 ignored when beta == 0), batched.
Vec matmul(const Vec& a, const Vec& b, const Vec* c0, const MatmulDims& dims, double alpha,
           double beta);

// Returns table rows gathered by ids: (N, C).
Vec embedding(const Vec& ids, const Vec& table, int64_t C);

// Fills out (N, C) = x / sqrt(mean(x^2) + eps) * weight and rstd (N).
void rmsnorm(const Vec& x, const Vec& weight, int64_t N, int64_t C, double eps, Vec& out,
             Vec& rstd);

// Returns x (B, T, H, D) with each half-split pair rotated by the position's angles.
Vec rope(const Vec& x, const Vec& positions, int64_t B, int64_t T, int64_t H, int64_t D,
         const RopeParams& params);

struct AttentionSpec {
  int64_t B = 1, T = 1, Hq = 1, Hkv = 1, D = 1;  // T: query rows
  bool causal = true;
  int window = 0;
  const Vec* doc_ids = nullptr;  // (B, doc_len) by absolute position, or null
  double scale = 0.0;            // 0: 1/sqrt(D)
  int64_t Tk = 0;                // key rows; 0: T
  int64_t q_offset = 0;          // absolute position of query row 0
  int64_t k_offset = 0;          // absolute position of key row 0
  SparsePattern pattern = SparsePattern::dense;
  int64_t segment = 0, stride = 0, sinks = 0;
  int64_t doc_len = 0;  // doc_ids' row length; 0: key_rows()

  int64_t key_rows() const { return Tk > 0 ? Tk : T; }
};

// Returns whether the query at absolute position t of batch row b sees the key at position s,
// decided from the masks' definitions one by one (not through backend/attention_mask.h): the
// dense (B, T, Tk) mask the backends must reproduce.
bool attention_visible(const AttentionSpec& spec, int64_t b, int64_t t, int64_t s);

// Fills out (B, T, Hq, D) and lse (B, Hq, T) of masked softmax attention over k, v
// (B, key_rows(), Hkv, D), query row t sitting at absolute position q_offset + t and key row j
// at k_offset + j.
void attention(const Vec& q, const Vec& k, const Vec& v, const AttentionSpec& spec, Vec& out,
               Vec& lse);

// Returns silu(gate) * up elementwise.
Vec swiglu(const Vec& gate, const Vec& up);

// Returns per-row losses mask * (logsumexp(row) - row[target]), 0 for ignored rows.
Vec cross_entropy(const Vec& logits, const Vec& targets, const Vec* mask, int64_t N, int64_t V,
                  int ignore_index);

}  // namespace anvil::test::f64
