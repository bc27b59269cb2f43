// Maps Backend::matmul's row-major problem onto cuBLASLt's column-major one. A row-major
// (r, c) matrix is the column-major (c, r) matrix of the same bytes, i.e. its transpose, so
// C = op(a) op(b) becomes C^T = op(b)^T op(a)^T: cuBLASLt's first operand is b (transposed
// when b is), its second is a, and m/n swap. Pure host arithmetic, unit-tested without a GPU.
// Shapes are assumed valid (the backend checks them with the reference's messages first).
#pragma once

#include <cstdint>

#include "core/shape.h"

namespace anvil::cuda {

// One cuBLASLt GEMM: D (m, n) = op(first) (m, k) @ op(second) (k, n), column-major.
struct GemmLayout {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_first = false;   // cuBLAS transa, applied to b's bytes
  bool transpose_second = false;  // cuBLAS transb, applied to a's bytes
  int64_t first_rows = 0, first_cols = 0, first_ld = 0;    // b as stored, column-major
  int64_t second_rows = 0, second_cols = 0, second_ld = 0; // a as stored, column-major
  int64_t c_rows = 0, c_cols = 0, c_ld = 0;
  int64_t batch = 1;
  int64_t first_stride = 0, second_stride = 0, c_stride = 0;  // elements between batch items
};

// Returns the layout for c = op(a) @ op(b) with a (M,K)/(K,M) or (P,.,.), b rank 2 (shared)
// or rank 3. A shared b with an untransposed a folds the batch into rows: one (P*M, K) GEMM.
GemmLayout plan_gemm_layout(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b);

// Returns the largest power of two (at most 256) dividing the address: cuBLASLt must be told
// the alignment of operands that are views into the middle of a buffer.
int pointer_alignment(const void* ptr);

}  // namespace anvil::cuda
