// plan_gemm_layout and pointer_alignment (see gemm_layout.h).
#include "backend/cuda/gemm_layout.h"

namespace anvil::cuda {

GemmLayout plan_gemm_layout(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b) {
  const bool batched = a.rank() == 3;
  const bool shared_b = b.rank() == 2;
  const int64_t batches = batched ? a[0] : 1;
  const int64_t a_rows = a.back(1), a_cols = a.back(0);
  const int64_t b_rows = b.back(1), b_cols = b.back(0);
  const int64_t M = transpose_a ? a_cols : a_rows;
  const int64_t K = transpose_a ? a_rows : a_cols;
  const int64_t N = transpose_b ? b_rows : b_cols;

  GemmLayout layout;
  layout.transpose_first = transpose_b;
  layout.transpose_second = transpose_a;
  layout.first_rows = b_cols;
  layout.first_cols = b_rows;
  layout.first_ld = b_cols;
  layout.second_rows = a_cols;
  layout.second_cols = a_rows;
  layout.second_ld = a_cols;
  layout.k = K;
  layout.m = N;
  layout.n = M;
  layout.c_rows = N;
  layout.c_cols = M;
  layout.c_ld = N;
  if (batched && shared_b && !transpose_a) {
    // (P, M, K) row-major is (P*M, K): the batch is just more rows of one GEMM.
    layout.second_cols = batches * a_rows;
    layout.n = batches * M;
    layout.c_cols = batches * M;
    return layout;
  }
  if (batched) {
    layout.batch = batches;
    layout.second_stride = a_rows * a_cols;
    layout.first_stride = shared_b ? 0 : b_rows * b_cols;
    layout.c_stride = M * N;
  }
  return layout;
}

int pointer_alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  int alignment = 1;
  while (alignment < 256 && address % (2 * alignment) == 0) alignment *= 2;
  return alignment;
}

}  // namespace anvil::cuda
