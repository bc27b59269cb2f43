// Embedding lookup and its scatter-add backward, whole-table or over a vocabulary shard (rows
// [vocab_begin, vocab_begin + vocab_rows) of the full table; ids outside it read as 0 and are
// not scattered), plus the index-range check shared with cross_entropy. The backward is
// atomic-free and deterministic without sorting: one block per token n; the block owning the
// FIRST occurrence of a token id gathers every later position with that id (in increasing
// order) and adds their rows into dtable[id] sequentially, so each table row is written by
// exactly one block and the f32 sum runs in the reference's order (bit-identical to the CPU
// reference). Finding duplicates costs O(N^2 / blockDim) id compares, read from L2
// (N = B*T is a few thousand per micro-batch).
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

__global__ void embedding_forward_kernel(const int32_t* ids, ConstArray table,
                                         int64_t vocab_begin, int64_t vocab_rows, int64_t cols,
                                         MutableArray out) {
  const int64_t row = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[row]) - vocab_begin;
  if (local < 0 || local >= vocab_rows) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store_float(out, row * cols + c, 0.0f);
    return;
  }
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store_float(out, row * cols + c, load_float(table, local * cols + c));
}

// Positions gathered per pass; one per thread of the block.
constexpr int kGatherBlock = 256;

__global__ void embedding_backward_kernel(const int32_t* ids, int64_t rows, ConstArray dout,
                                          int64_t cols, int64_t vocab_begin,
                                          int64_t vocab_rows, float* dtable) {
  __shared__ int64_t positions[kGatherBlock];
  __shared__ int warp_counts[kGatherBlock / 32];
  const int64_t token = blockIdx.x;
  const int32_t id = ids[token];
  const int64_t local = static_cast<int64_t>(id) - vocab_begin;
  if (local < 0 || local >= vocab_rows) return;  // another shard's row (uniform per block)
  // Only the first occurrence of `id` does the work.
  for (int64_t base = 0; base < token; base += kGatherBlock) {
    const int64_t m = base + threadIdx.x;
    if (__syncthreads_or(m < token && ids[m] == id)) return;
  }
  float* table_row = dtable + local * cols;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t base = token; base < rows; base += kGatherBlock) {
    const int64_t m = base + threadIdx.x;
    const bool match = m < rows && ids[m] == id;
    // Order-preserving compaction of the matches: warp ballots, then a prefix over warps.
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, total = 0;
    for (int w = 0; w < kGatherBlock / 32; ++w) {
      if (w < warp) offset += warp_counts[w];
      total += warp_counts[w];
    }
    if (match) positions[offset + __popc(ballot & ((1u << lane) - 1u))] = m;
    __syncthreads();
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float sum = table_row[c];
      for (int j = 0; j < total; ++j) sum += load_float(dout, positions[j] * cols + c);
      table_row[c] = sum;
    }
    __syncthreads();  // positions and warp_counts are rewritten by the next pass
  }
}

}  // namespace

void launch_embedding_forward(const int32_t* ids, int64_t rows, ConstArray table,
                              int64_t vocab_begin, int64_t vocab_rows, int64_t cols,
                              MutableArray out, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  embedding_forward_kernel<<<static_cast<unsigned>(rows), kBlockSize, 0, stream>>>(
      ids, table, vocab_begin, vocab_rows, cols, out);
}

void launch_embedding_backward(const int32_t* ids, int64_t rows, ConstArray dout, int64_t cols,
                               int64_t vocab_begin, int64_t vocab_rows, float* dtable,
                               cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  embedding_backward_kernel<<<static_cast<unsigned>(rows), kGatherBlock, 0, stream>>>(
      ids, rows, dout, cols, vocab_begin, vocab_rows, dtable);
}

}  // namespace anvil::cuda
