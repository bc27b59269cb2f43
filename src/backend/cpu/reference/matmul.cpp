// Reference matmul: c = alpha * op(a) @ op(b) + beta * c, plain or batched, b optionally shared
// across the batch. Operands are first copied into f32 row-major op(a) (M, K) and op(b)^T
// (N, K) so every output element is one contiguous dot product, summed in double in k order,
// rounded to f32 (the accumulator every backend promises) and then to c's dtype. Rows are
// independent, so the row loop runs in parallel without changing any result.
#include <cstdint>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_ref {
namespace {

constexpr const char* kOp = "matmul";

// Returns matrix `batch` of t (rows, cols) as f32, transposed when asked.
std::vector<float> read_matrix(const Tensor& t, int64_t batch, bool transpose) {
  const int64_t rows = t.shape.back(1), cols = t.shape.back(0);
  std::vector<float> stored = read_floats(t, batch * rows * cols, rows * cols);
  if (!transpose) return stored;
  std::vector<float> transposed(stored.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) transposed[c * rows + r] = stored[r * cols + c];
  return transposed;
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
            bool transpose_b, float alpha, float beta) {
  const int rank = a.shape.rank();
  const int64_t batches = rank == 3 ? a.shape[0] : 1;
  const bool shared_b = b.shape.rank() == 2;
  const int64_t M = transpose_a ? a.shape.back(0) : a.shape.back(1);
  const int64_t K = transpose_a ? a.shape.back(1) : a.shape.back(0);
  const int64_t N = transpose_b ? b.shape.back(1) : b.shape.back(0);

  std::vector<float> b_cols;  // op(b)^T as (N, K) when shared across the batch
  if (shared_b) b_cols = read_matrix(b, 0, !transpose_b);
  for (int64_t p = 0; p < batches; ++p) {
    const std::vector<float> a_rows = read_matrix(a, p, transpose_a);
    if (!shared_b) b_cols = read_matrix(b, p, !transpose_b);
    const std::vector<float> c_old = beta != 0.0f ? read_floats(c, p * M * N, M * N)
                                                  : std::vector<float>{};
    std::vector<float> result(static_cast<size_t>(M * N));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double dot = 0.0;
        for (int64_t k = 0; k < K; ++k)
          dot += static_cast<double>(a_rows[i * K + k]) * static_cast<double>(b_cols[j * K + k]);
        double value = static_cast<double>(alpha) * dot;
        if (beta != 0.0f) value += static_cast<double>(beta) * c_old[i * N + j];
        result[i * N + j] = static_cast<float>(value);
      }
    }
    write_floats(c, p * M * N, M * N, result.data());
  }
}

}  // namespace anvil::cpu_ref
