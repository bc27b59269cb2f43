// Embedding lookup and its scatter-add backward, whole-table or over a vocabulary shard (rows
// [vocab_begin, vocab_begin + vocab_rows) of the full table; ids outside it read as 0 and are
// not scattered). Rows move in 16-byte packs (vector_io.cuh), storage types as template tags.
// The backward is atomic-free and deterministic without sorting: one block per token n; the
// block owning the FIRST occurrence of a token id gathers every later position with that id
// (in increasing order) and adds their rows into dtable[id] sequentially, so each table row
// is written by exactly one block and the f32 sum runs in the reference's order
// (bit-identical to the CPU reference). Finding duplicates costs O(N^2 / blockDim) id
// compares, read from L2 (N = B*T is a few thousand per micro-batch).
#include "backend/cuda/vector_io.cuh"

namespace anvil::cuda {
namespace {

template <class T, class O>
__global__ void embedding_forward_kernel(const int32_t* ids, ConstArray table,
                                         int64_t vocab_begin, int64_t vocab_rows, int64_t cols,
                                         MutableArray out, bool vectorized) {
  const int64_t row = blockIdx.x;
  const int64_t local = static_cast<int64_t>(ids[row]) - vocab_begin;
  const bool inside = local >= 0 && local < vocab_rows;  // uniform per block
  const int64_t packs = (cols + kPackElements - 1) / kPackElements;
  for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
    float v[kPackElements] = {};
    if (inside) load_pack<T>(table, row_pack(local * cols, cols, j, vectorized), v);
    store_pack<O>(out, row_pack(row * cols, cols, j, vectorized), v);
  }
}

// Positions gathered per pass; one per thread of the block.
constexpr int kGatherBlock = 256;

template <class D>
__global__ void __launch_bounds__(kGatherBlock)
    embedding_backward_kernel(const int32_t* ids, int64_t rows, ConstArray dout, int64_t cols,
                              int64_t vocab_begin, int64_t vocab_rows, float* dtable,
                              bool vectorized) {
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
  const int64_t packs = (cols + kPackElements - 1) / kPackElements;
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
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      const Pack at = row_pack(local * cols, cols, j, vectorized);
      float sum[kPackElements];
      load_pack<F32>(dtable, DType::f32, at, sum);
      for (int k = 0; k < total; ++k) {
        float d[kPackElements];
        load_pack<D>(dout, row_pack(positions[k] * cols, cols, j, vectorized), d);
#pragma unroll
        for (int i = 0; i < kPackElements; ++i) sum[i] = __fadd_rn(sum[i], d[i]);
      }
      store_pack<F32>(dtable, DType::f32, at, sum);
    }
    __syncthreads();  // positions and warp_counts are rewritten by the next pass
  }
}

}  // namespace

void launch_embedding_forward(const int32_t* ids, int64_t rows, ConstArray table,
                              int64_t vocab_begin, int64_t vocab_rows, int64_t cols,
                              MutableArray out, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const bool vectorized = rows_vectorized(cols, {accessed(table), accessed(out)});
  const unsigned grid = static_cast<unsigned>(rows);
  const int threads = row_block_threads(cols, kBlockSize);
  if (table.dtype == DType::bf16 && out.dtype == DType::bf16)
    embedding_forward_kernel<Bf16, Bf16><<<grid, threads, 0, stream>>>(
        ids, table, vocab_begin, vocab_rows, cols, out, vectorized);
  else if (table.dtype == DType::f32 && out.dtype == DType::f32)
    embedding_forward_kernel<F32, F32><<<grid, threads, 0, stream>>>(
        ids, table, vocab_begin, vocab_rows, cols, out, vectorized);
  else
    embedding_forward_kernel<AnyFloat, AnyFloat><<<grid, threads, 0, stream>>>(
        ids, table, vocab_begin, vocab_rows, cols, out, vectorized);
}

void launch_embedding_backward(const int32_t* ids, int64_t rows, ConstArray dout, int64_t cols,
                               int64_t vocab_begin, int64_t vocab_rows, float* dtable,
                               cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const bool vectorized = rows_vectorized(cols, {accessed(dout), {dtable, sizeof(float)}});
  const unsigned grid = static_cast<unsigned>(rows);
  switch (dout.dtype) {
    case DType::bf16:
      embedding_backward_kernel<Bf16><<<grid, kGatherBlock, 0, stream>>>(
          ids, rows, dout, cols, vocab_begin, vocab_rows, dtable, vectorized);
      break;
    case DType::f32:
      embedding_backward_kernel<F32><<<grid, kGatherBlock, 0, stream>>>(
          ids, rows, dout, cols, vocab_begin, vocab_rows, dtable, vectorized);
      break;
    default:
      embedding_backward_kernel<AnyFloat><<<grid, kGatherBlock, 0, stream>>>(
          ids, rows, dout, cols, vocab_begin, vocab_rows, dtable, vectorized);
      break;
  }
}

}  // namespace anvil::cuda
