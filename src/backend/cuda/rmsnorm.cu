// RMSNorm forward and backward with the reference's numerics: per-row sums of squares and
// dot products in double, f32 element math in Hugging Face's order, weight * (x * rstd).
// Forward and dx use one block per row. dweight (a column sum over all rows) is deterministic
// without atomics: rows are split into at most kRowChunks fixed chunks whose double partial
// sums go to scratch, and a second kernel adds the chunks in order.
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

constexpr int64_t kRowChunks = 64;

int64_t row_chunks(int64_t rows) { return rows < kRowChunks ? rows : kRowChunks; }

__global__ void rmsnorm_forward_kernel(ConstArray x, ConstArray weight, MutableArray out,
                                       float* rstd, int64_t cols, float eps) {
  const int64_t offset = blockIdx.x * cols;
  double sum_sq = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double value = load_float(x, offset + c);
    sum_sq += value * value;
  }
  sum_sq = block_sum(sum_sq);
  const float mean_sq = static_cast<float>(sum_sq / static_cast<double>(cols));
  const float r = 1.0f / sqrtf(mean_sq + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store_float(out, offset + c, load_float(weight, c) * (load_float(x, offset + c) * r));
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

__global__ void rmsnorm_dx_kernel(ConstArray dout, ConstArray x, ConstArray weight,
                                  const float* rstd, MutableArray dx, int64_t cols) {
  const int64_t offset = blockIdx.x * cols;
  const float r = rstd[blockIdx.x];
  double dot = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    dot += static_cast<double>(load_float(dout, offset + c) * load_float(weight, c)) *
           load_float(x, offset + c);
  dot = block_sum(dot);
  const double rd = r;
  const float coeff = static_cast<float>(dot / static_cast<double>(cols) * rd * rd * rd);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float gw = load_float(dout, offset + c) * load_float(weight, c);
    const float previous = load_float(dx.data, dx.dtype, offset + c);
    store_float(dx, offset + c, previous + (r * gw - load_float(x, offset + c) * coeff));
  }
}

__global__ void rmsnorm_dweight_partial_kernel(ConstArray dout, ConstArray x, const float* rstd,
                                               int64_t rows, int64_t cols, int64_t chunk_rows,
                                               double* partials) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= cols) return;
  const int64_t begin = blockIdx.y * chunk_rows;
  const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  double sum = 0.0;
  for (int64_t n = begin; n < end; ++n)
    sum += static_cast<double>(load_float(dout, n * cols + c)) *
           (load_float(x, n * cols + c) * rstd[n]);
  partials[blockIdx.y * cols + c] = sum;
}

__global__ void rmsnorm_dweight_finish_kernel(const double* partials, int64_t chunks,
                                              int64_t cols, float* dweight) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= cols) return;
  double sum = 0.0;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partials[chunk * cols + c];
  dweight[c] += static_cast<float>(sum);
}

}  // namespace

void launch_rmsnorm_forward(ConstArray x, ConstArray weight, MutableArray out, float* rstd,
                            int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(rows), kBlockSize, 0, stream>>>(
      x, weight, out, rstd, cols, eps);
}

size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(row_chunks(rows) * cols) * sizeof(double);
}

void launch_rmsnorm_backward(ConstArray dout, ConstArray x, ConstArray weight, const float* rstd,
                             MutableArray dx, float* dweight, int64_t rows, int64_t cols,
                             void* scratch, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  rmsnorm_dx_kernel<<<static_cast<unsigned>(rows), kBlockSize, 0, stream>>>(dout, x, weight,
                                                                            rstd, dx, cols);
  const int64_t chunks = row_chunks(rows);
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  const unsigned column_blocks = static_cast<unsigned>((cols + kBlockSize - 1) / kBlockSize);
  auto* partials = static_cast<double*>(scratch);
  rmsnorm_dweight_partial_kernel<<<dim3(column_blocks, static_cast<unsigned>(chunks)),
                                   kBlockSize, 0, stream>>>(dout, x, rstd, rows, cols,
                                                            chunk_rows, partials);
  rmsnorm_dweight_finish_kernel<<<column_blocks, kBlockSize, 0, stream>>>(partials, chunks, cols,
                                                                          dweight);
}

}  // namespace anvil::cuda
