// Shared pieces of the tensor-core attention kernels (attention_tc_forward.cu,
// attention_tc_backward.cu): bf16 mma.sync m16n8k16 with f32 accumulation, ldmatrix fragment
// loads, cp.async 16-byte tile copies, and the per-tile mask bookkeeping.
// Tiles are 64 query rows x 64 key rows; a block is 4 warps, each owning 16 rows of the block's
// tile. Shared tiles are row-major with rows padded by 8 bf16 (16 bytes), which puts the 8 rows
// one ldmatrix reads in 8 different bank groups. Fragment layouts (PTX ISA, mma m16n8k16):
// lane = 4 g + t; A (16 x 16) a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 =
// (g+8, 2t+8..); B (16 x 8, k x n) b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g); C (16 x 8)
// c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1). A C tile of scores converts to an A fragment
// of probabilities without moving data between lanes (FlashAttention-2's register reuse).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "backend/attention_tiles.h"
#include "backend/cuda/attention_common.cuh"

namespace anvil::cuda_attention::tc {

inline constexpr int kTile = 64;      // query rows and key rows per tile
inline constexpr int kWarps = 4;      // 16 rows of the tile each
inline constexpr int kThreads = 32 * kWarps;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// bf16 elements per shared row of a tile with head dim D (16 bytes of padding).
template <int D>
inline constexpr int kRowStride = D + 8;
// bf16 elements of one shared tile.
template <int D>
inline constexpr int kTileElements = kTile * kRowStride<D>;

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Copies 16 bytes global -> shared asynchronously; zero-fills the destination when !valid
// (then `source` is not read but must still be a valid address).
__device__ __forceinline__ void copy_16_async(void* destination, const void* source, bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(destination)),
               "l"(source), "r"(source_bytes));
}

__device__ __forceinline__ void commit_async_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N committed groups of this thread's copies are still in flight.
template <int N>
__device__ __forceinline__ void wait_async_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Loads four 8 x 8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], const bf16* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address)));
}

// As load_matrix_x4, each matrix transposed.
__device__ __forceinline__ void load_matrix_x4_transposed(uint32_t (&r)[4],
                                                          const bf16* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address)));
}

// d += a * b for one m16n8k16 bf16 product with f32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Returns two floats rounded to bf16 in one register: `low` in bits 0-15 (the lower column).
__device__ __forceinline__ uint32_t pack_bf16(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// The A fragment (16 x 16) at (row0, col0) of a row-major shared tile.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int row0, int col0) {
  const int lane = threadIdx.x % 32;
  load_matrix_x4(a, tile + (row0 + lane % 16) * kRowStride<D> + col0 + (lane / 16) * 8);
}

// B fragments of two n-tiles (n0 and n0 + 8) over k in [k0, k0 + 16) from a shared tile stored
// as [n][k] (each row one n): b = {b0, b1 of n-tile n0, b0, b1 of n-tile n0 + 8}.
template <int D>
__device__ __forceinline__ void load_b_rows_n(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  load_matrix_x4(b, tile + (n0 + lane % 8 + (lane / 16) * 8) * kRowStride<D> + k0 +
                        ((lane / 8) % 2) * 8);
}

// The same two n-tiles from a shared tile stored as [k][n] (each row one k).
template <int D>
__device__ __forceinline__ void load_b_rows_k(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  load_matrix_x4_transposed(
      b, tile + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * kRowStride<D> + n0 + (lane / 16) * 8);
}

// acc += A B over the tile's 64 keys or queries: A is a 16 x 64 operand held in registers as the
// eight m16n8 C fragments of an earlier mma (probabilities, scores or their gradients; each
// k-step of 16 is two of them, repacked to bf16 as one A fragment), B a 64 x D shared tile
// stored [k][n]; acc holds D / 8 n-tiles. O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <int D>
__device__ __forceinline__ void mma_registers_by_tile(float (&acc)[D / 8][4],
                                                      const float (&a)[kTile / 8][4],
                                                      const bf16* b_tile) {
#pragma unroll
  for (int step = 0; step < kTile / 16; ++step) {
    const uint32_t fragment[4] = {pack_bf16(a[2 * step][0], a[2 * step][1]),
                                  pack_bf16(a[2 * step][2], a[2 * step][3]),
                                  pack_bf16(a[2 * step + 1][0], a[2 * step + 1][1]),
                                  pack_bf16(a[2 * step + 1][2], a[2 * step + 1][3])};
#pragma unroll
    for (int pair = 0; pair < D / 16; ++pair) {
      uint32_t b[4];
      load_b_rows_k<D>(b, b_tile, pair * 16, step * 16);
      mma_bf16(acc[2 * pair], fragment, b[0], b[1]);
      mma_bf16(acc[2 * pair + 1], fragment, b[2], b[3]);
    }
  }
}

// Starts copying rows [row0, row0 + kTile) of head h, batch b of a (B, T, H, D) bf16 tensor into
// a shared tile; rows at or past T become zeros.
template <int D>
__device__ __forceinline__ void copy_tile_async(bf16* tile, const bf16* source, int b, int row0,
                                                int T, int h, int H) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks, t = row0 + r;
    const bool valid = t < T;
    const bf16* from = valid ? source + ((static_cast<int64_t>(b) * T + t) * H + h) * D + c * 8
                             : source;
    copy_16_async(tile + r * kRowStride<D> + c * 8, from, valid);
  }
}

// Fills ids[i] with the document id of row row0 + i (absolute position offset + row0 + i) of
// batch b for i < kTile; rows at or past `rows` repeat the first row's id (padding must not
// make a tile look mixed). Threads 0..kTile-1 write; visible after the next barrier.
__device__ __forceinline__ void load_document_ids(int32_t* ids, const Geometry& g, int b,
                                                  int offset, int row0, int rows) {
  if (threadIdx.x >= kTile) return;
  const int row = row0 + static_cast<int>(threadIdx.x) < rows ? row0 + threadIdx.x : row0;
  ids[threadIdx.x] = g.doc_ids[static_cast<int64_t>(b) * g.doc_len + offset + row];
}

// The least and greatest of kTile document ids, computed by every warp on its own (no barrier).
struct DocumentSpan {
  int32_t low;
  int32_t high;
};

__device__ __forceinline__ DocumentSpan document_span(const int32_t* ids) {
  const int lane = threadIdx.x % 32;
  int32_t low = min(ids[lane], ids[lane + 32]), high = max(ids[lane], ids[lane + 32]);
  for (int offset = 16; offset > 0; offset >>= 1) {
    low = min(low, __shfl_xor_sync(0xffffffffu, low, offset));
    high = max(high, __shfl_xor_sync(0xffffffffu, high, offset));
  }
  return DocumentSpan{low, high};
}

// What a (query tile, key tile) pair needs: skipping, a per-element mask, or neither.
struct TilePlan {
  bool skip;
  bool masked;
};

// Plans the tile of query rows [t0, t0 + kTile) and key rows [s0, s0 + kTile) (either may run
// past Tq / Tk). Document spans are used when g.doc_ids is set. Uniform across the block.
__device__ __forceinline__ TilePlan plan_tile(const Geometry& g, int t0, int s0,
                                              DocumentSpan query_docs, DocumentSpan key_docs) {
  const int last_t = min(t0 + kTile, g.Tq) - 1, last_s = min(s0 + kTile, g.Tk) - 1;
  const TileVisibility visibility =
      classify_tile(g.rule, g.q_offset + t0, g.q_offset + last_t, g.k_offset + s0,
                    g.k_offset + last_s);
  bool skip = visibility == TileVisibility::hidden;
  bool masked = visibility != TileVisibility::full || s0 + kTile > g.Tk;
  if (g.doc_ids != nullptr) {
    // Disjoint id ranges share no document; one id on both sides hides nothing.
    skip |= query_docs.high < key_docs.low || key_docs.high < query_docs.low;
    masked |= !(query_docs.low == query_docs.high && key_docs.low == key_docs.high &&
                query_docs.low == key_docs.low);
  }
  return TilePlan{skip, masked};
}

// Returns whether query row t (of the call) sees key row s, with the tiles' document ids at
// query_ids[t - t0] and key_ids[s - s0] (unused without documents). Key rows past Tk are hidden.
__device__ __forceinline__ bool element_visible(const Geometry& g, int t, int s,
                                                const int32_t* query_ids, int32_t query_index,
                                                const int32_t* key_ids, int32_t key_index) {
  if (s >= g.Tk) return false;
  if (!position_visible(g.rule, g.q_offset + t, g.k_offset + s)) return false;
  return g.doc_ids == nullptr || query_ids[query_index] == key_ids[key_index];
}

// Returns the visibility of this lane's 32 elements of a warp's 16 x 64 score tile as bits
// (bit 4 n + e: n-tile n, C register e). Rows of the warp tile start at tile row warp_row0;
// `keys_are_rows` says the tile is S^T (rows are keys, columns queries). One loop, not unrolled:
// the mask test is compiled once, not 32 times.
__device__ __forceinline__ uint32_t visible_bits(const Geometry& g, int t0, int s0, int warp_row0,
                                                 bool keys_are_rows, const int32_t* query_ids,
                                                 const int32_t* key_ids) {
  const int lane = threadIdx.x % 32, group_row = lane / 4, quad = lane % 4;
  uint32_t bits = 0;
#pragma unroll 1
  for (int i = 0; i < 32; ++i) {
    const int n = i / 4, e = i % 4;
    const int tile_row = warp_row0 + group_row + 8 * (e / 2), tile_col = n * 8 + 2 * quad + e % 2;
    const int query = keys_are_rows ? tile_col : tile_row;
    const int key = keys_are_rows ? tile_row : tile_col;
    if (element_visible(g, t0 + query, s0 + key, query_ids, query, key_ids, key)) bits |= 1u << i;
  }
  return bits;
}

// The row-major index of element d of row t, head h, batch b in a (B, T, H, D) tensor.
__device__ __forceinline__ int64_t row_element(int b, int t, int h, int T, int H, int D, int d) {
  return ((static_cast<int64_t>(b) * T + t) * H + h) * D + d;
}

// Writes a 16 x D warp accumulator (n-tiles of 8 columns, C layout) times `multiplier` as bf16
// into rows warp_row0.. of a shared tile.
template <int D>
__device__ __forceinline__ void stage_accumulator(bf16* tile, const float (&acc)[D / 8][4],
                                                  int warp_row0, float multiplier_low,
                                                  float multiplier_high) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = n * 8 + 2 * t;
    *reinterpret_cast<uint32_t*>(tile + (warp_row0 + g) * kRowStride<D> + col) =
        pack_bf16(acc[n][0] * multiplier_low, acc[n][1] * multiplier_low);
    *reinterpret_cast<uint32_t*>(tile + (warp_row0 + g + 8) * kRowStride<D> + col) =
        pack_bf16(acc[n][2] * multiplier_high, acc[n][3] * multiplier_high);
  }
}

// Stores rows [row0, min(row0 + kTile, T)) of a shared tile into head h, batch b of a
// (B, T, H, D) bf16 tensor with 16-byte stores. Call after a barrier that follows the staging.
template <int D>
__device__ __forceinline__ void store_tile(bf16* destination, const bf16* tile, int b, int row0,
                                           int T, int h, int H) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks, t = row0 + r;
    if (t >= T) continue;
    *reinterpret_cast<uint4*>(destination + row_element(b, t, h, T, H, D, c * 8)) =
        *reinterpret_cast<const uint4*>(tile + r * kRowStride<D> + c * 8);
  }
}

}  // namespace anvil::cuda_attention::tc
