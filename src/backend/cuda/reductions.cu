// Reductions behind gradient clipping, overflow checks and the loss sum. sum_squares
// accumulates in double in a fixed order (per-thread strides, then block sums into scratch,
// then one block adds the block sums), so it is deterministic run to run. sum_to_double is
// the serial index-order sum. find_nonfinite only ever writes 1, so its racing stores are
// benign.
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

constexpr int64_t kSumBlocks = 1024;

__global__ void sum_squares_partial_kernel(ConstArray x, int64_t n, double* partials) {
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double value = load_float(x, i);
    sum += value * value;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void sum_squares_finish_kernel(const double* partials, int64_t count, double* result) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *result = sum;
}

// The loss sum of a micro-batch is defined as the host's serial double sum in index order,
// so every backend gives the same bits: one block stages tiles of x through shared memory
// with coalesced loads (the next tile loads while the current one is added) and thread 0
// adds each tile's values in order. Only the chain of dependent double adds remains serial.
constexpr int kSumThreads = 1024;
constexpr int kSumTile = 4096;  // floats per tile; two tiles are 32 KiB of shared memory

__global__ void __launch_bounds__(kSumThreads)
    sum_to_double_kernel(const float* x, int64_t n, double* result) {
  __shared__ float tiles[2][kSumTile];
  const int64_t tile_count = (n + kSumTile - 1) / kSumTile;
  auto load_tile = [&](int64_t tile) {
    float* into = tiles[tile & 1];
    const int64_t base = tile * kSumTile;
    for (int i = threadIdx.x; i < kSumTile; i += blockDim.x)
      if (base + i < n) into[i] = x[base + i];
  };
  if (tile_count > 0) load_tile(0);
  __syncthreads();
  double sum = 0.0;
  for (int64_t tile = 0; tile < tile_count; ++tile) {
    if (tile + 1 < tile_count) load_tile(tile + 1);  // the other buffer: added a round ago
    if (threadIdx.x == 0) {
      const float* values = tiles[tile & 1];
      const int64_t left = n - tile * kSumTile;
      const int count = left < kSumTile ? static_cast<int>(left) : kSumTile;
#pragma unroll 8
      for (int i = 0; i < count; ++i) sum += values[i];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *result = sum;
}

__global__ void find_nonfinite_kernel(ConstArray x, int64_t n, int* nonfinite) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    if (!isfinite(load_float(x, i))) *nonfinite = 1;
}

}  // namespace

int64_t sum_squares_scratch_count() { return kSumBlocks; }

void launch_sum_squares(ConstArray x, int64_t n, double* scratch, double* result,
                        cudaStream_t stream) {
  const unsigned blocks = grid_for(n) < kSumBlocks ? grid_for(n) : kSumBlocks;
  sum_squares_partial_kernel<<<blocks, kBlockSize, 0, stream>>>(x, n, scratch);
  sum_squares_finish_kernel<<<1, kBlockSize, 0, stream>>>(scratch, blocks, result);
}

void launch_sum_to_double(const float* x, int64_t n, double* result, cudaStream_t stream) {
  sum_to_double_kernel<<<1, kSumThreads, 0, stream>>>(x, n, result);
}

void launch_find_nonfinite(ConstArray x, int64_t n, int* nonfinite, cudaStream_t stream) {
  if (n == 0) return;
  find_nonfinite_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, n, nonfinite);
}

}  // namespace anvil::cuda
