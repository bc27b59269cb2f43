// Flash-attention backward on tensor cores (bf16, head dim 64 or 128; the CUDA-core kernels of
// attention_backward.cu serve the rest), without a single atomic, in three launches:
//   1. delta[b, h, t] = dout_t . out_t in f32 (the workspace);
//   2. key-tile blocks: one per (64 keys, batch, kv head), 4 warps of 16 keys, K and V resident
//      in shared memory, dK and dV in registers; they walk every query head of the GQA group
//      and every query tile that can see their keys (Q, dO, lse and delta double-buffered with
//      cp.async) and form S^T = K Q^T, P^T = exp(S^T - lse), dV += P^T dO, dP^T = V dO^T,
//      dS^T = P^T (dP^T - delta), dK += dS^T Q;
//   3. query-tile blocks: one per (64 queries, batch, query head), Q and dO resident, walking
//      the visible key tiles (K and V double-buffered) to form dQ += dS K.
// S and P are computed twice (FlashAttention-2's price for a dQ without atomics): about 1.4x the
// backward's matmul work, each output row written once by one block, so results are
// deterministic. Tiles are planned as in the forward (attention_tiles.h, document spans).
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_tc_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace anvil::cuda_attention::tc {
namespace {

// Shared bytes of either main backward kernel: four tiles double-buffered as two stages of two
// plus two resident tiles, two stages of 64 floats of lse and delta, document ids.
template <int D>
constexpr size_t backward_shared_bytes() {
  return static_cast<size_t>(6 * kTileElements<D>) * sizeof(bf16) +
         static_cast<size_t>(4 * kTile) * sizeof(float) +
         static_cast<size_t>(3 * kTile) * sizeof(int32_t);
}

// delta (B, Hq, Tq) = rowsum(dout * out) in f32; one warp per row, two elements per lane.
__global__ void tc_delta_kernel(Geometry g, const bf16* __restrict__ dout,
                                const bf16* __restrict__ out, float* __restrict__ delta) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = static_cast<int64_t>(g.B) * g.Hq * g.Tq;
  if (row >= rows) return;  // whole warps leave together
  const int t = static_cast<int>(row % g.Tq);
  const int h = static_cast<int>(row / g.Tq % g.Hq);
  const int b = static_cast<int>(row / (static_cast<int64_t>(g.Tq) * g.Hq));
  const int64_t base = row_element(b, t, h, g.Tq, g.Hq, g.D, 0);
  float sum = 0.0f;
  for (int d = 2 * lane; d < g.D; d += 64) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dout + base + d));
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(out + base + d));
    sum += x.x * y.x + x.y * y.y;
  }
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

// Copies lse and delta of rows [t0, t0 + kTile) of head h, batch b into shared floats; rows past
// Tq get lse = -inf (so P = 0) and delta = 0. Threads 0..kTile-1; visible after a barrier.
__device__ __forceinline__ void load_row_statistics(float* lse_rows, float* delta_rows,
                                                    const Geometry& g, const float* lse,
                                                    const float* delta, int b, int h, int t0) {
  if (threadIdx.x >= kTile) return;
  const int t = t0 + threadIdx.x;
  const int64_t at = (static_cast<int64_t>(b) * g.Hq + h) * g.Tq + t;
  lse_rows[threadIdx.x] = t < g.Tq ? lse[at] : -INFINITY;
  delta_rows[threadIdx.x] = t < g.Tq ? delta[at] : 0.0f;
}

// Returns exp(x * scale - lse) computed in base 2, or 0 for a hidden element or a row that saw
// no key (lse = -inf).
__device__ __forceinline__ float probability(float score, float scale_log2, float row_lse,
                                             bool visible) {
  if (!visible || row_lse == -INFINITY) return 0.0f;
  return exp2f(score * scale_log2 - row_lse * kLog2e);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    tc_backward_key_kernel(Geometry g, const bf16* __restrict__ dout, const bf16* __restrict__ q,
                           const bf16* __restrict__ k, const bf16* __restrict__ v,
                           const float* __restrict__ lse, const float* __restrict__ delta,
                           bf16* __restrict__ dk, bf16* __restrict__ dv) {
  constexpr int kDSteps = D / 16, kOutTiles = D / 8;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  bf16* k_tile = reinterpret_cast<bf16*>(shared_raw);
  bf16* v_tile = k_tile + kTileElements<D>;
  bf16* q_tiles = v_tile + kTileElements<D>;        // two stages
  bf16* dout_tiles = q_tiles + 2 * kTileElements<D>;  // two stages
  float* lse_rows = reinterpret_cast<float*>(dout_tiles + 2 * kTileElements<D>);  // two stages
  float* delta_rows = lse_rows + 2 * kTile;                                        // two stages
  int32_t* key_ids = reinterpret_cast<int32_t*>(delta_rows + 2 * kTile);
  int32_t* query_ids = key_ids + kTile;  // two stages

  const int s0 = blockIdx.x * kTile;
  const int b = blockIdx.y / g.Hkv, kv_head = blockIdx.y % g.Hkv;
  const int warp = threadIdx.x / 32, quad = threadIdx.x % 4;
  const int warp_key0 = warp * 16;
  const int last_key = min(s0 + kTile, g.Tk) - 1;
  const float scale_log2 = g.scale * kLog2e;

  const Range rows = query_rows_seeing(g, s0, last_key);
  const int query_tiles = rows.end > rows.begin ? (rows.end - rows.begin + kTile - 1) / kTile : 0;
  const int items = query_tiles * g.group;  // (query head of the group, query tile) pairs

  float dk_acc[kOutTiles][4], dv_acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;

  auto item_head = [&](int item) { return kv_head * g.group + item / query_tiles; };
  auto item_row0 = [&](int item) { return rows.begin + (item % query_tiles) * kTile; };
  auto prefetch = [&](int item, int stage) {
    const int h = item_head(item), t0 = item_row0(item);
    copy_tile_async<D>(q_tiles + stage * kTileElements<D>, q, b, t0, g.Tq, h, g.Hq);
    copy_tile_async<D>(dout_tiles + stage * kTileElements<D>, dout, b, t0, g.Tq, h, g.Hq);
    commit_async_copies();
    load_row_statistics(lse_rows + stage * kTile, delta_rows + stage * kTile, g, lse, delta, b, h,
                        t0);
    if (g.doc_ids != nullptr) load_document_ids(query_ids + stage * kTile, g, b, g.q_offset, t0, g.Tq);
  };

  if (items > 0) {
    copy_tile_async<D>(k_tile, k, b, s0, g.Tk, kv_head, g.Hkv);
    copy_tile_async<D>(v_tile, v, b, s0, g.Tk, kv_head, g.Hkv);
    if (g.doc_ids != nullptr) load_document_ids(key_ids, g, b, g.k_offset, s0, g.Tk);
    prefetch(0, 0);  // commits K, V and the first Q, dO as one group
  }
  DocumentSpan key_docs{0, 0};
  for (int item = 0; item < items; ++item) {
    const int stage = item % 2, t0 = item_row0(item);
    const bf16* q_tile = q_tiles + stage * kTileElements<D>;
    const bf16* dout_tile = dout_tiles + stage * kTileElements<D>;
    const float* tile_lse = lse_rows + stage * kTile;
    const float* tile_delta = delta_rows + stage * kTile;
    const int32_t* tile_query_ids = query_ids + stage * kTile;
    if (item + 1 < items) {
      prefetch(item + 1, 1 - stage);
      wait_async_copies<1>();
    } else {
      wait_async_copies<0>();
    }
    __syncthreads();
    if (item == 0 && g.doc_ids != nullptr) key_docs = document_span(key_ids);
    const DocumentSpan query_docs =
        g.doc_ids != nullptr ? document_span(tile_query_ids) : DocumentSpan{0, 0};
    const TilePlan plan = plan_tile(g, t0, s0, query_docs, key_docs);
    if (!plan.skip) {
      // S^T (16 keys x 64 queries per warp) = K Q^T.
      float p[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) p[n][0] = p[n][1] = p[n][2] = p[n][3] = 0.0f;
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) {
        uint32_t ka[4];
        load_a<D>(ka, k_tile, warp_key0, d * 16);
#pragma unroll
        for (int pair = 0; pair < 4; ++pair) {
          uint32_t qb[4];
          load_b_rows_n<D>(qb, q_tile, pair * 16, d * 16);
          mma_bf16(p[2 * pair], ka, qb[0], qb[1]);
          mma_bf16(p[2 * pair + 1], ka, qb[2], qb[3]);
        }
      }
      // P^T, masked where the plan says so.
      const uint32_t visible =
          plan.masked ? visible_bits(g, t0, s0, warp_key0, true, tile_query_ids, key_ids)
                      : 0xffffffffu;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = n * 8 + 2 * quad + e % 2;
          p[n][e] = probability(p[n][e], scale_log2, tile_lse[row], (visible >> (4 * n + e)) & 1u);
        }
      }
      // dV += P^T dO (k-steps of 16 queries).
      mma_registers_by_tile<D>(dv_acc, p, dout_tile);
      // dP^T = V dO^T, then dS^T = P^T (dP^T - delta) in place of dP^T.
      float ds[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) ds[n][0] = ds[n][1] = ds[n][2] = ds[n][3] = 0.0f;
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) {
        uint32_t va[4];
        load_a<D>(va, v_tile, warp_key0, d * 16);
#pragma unroll
        for (int pair = 0; pair < 4; ++pair) {
          uint32_t ob[4];
          load_b_rows_n<D>(ob, dout_tile, pair * 16, d * 16);
          mma_bf16(ds[2 * pair], va, ob[0], ob[1]);
          mma_bf16(ds[2 * pair + 1], va, ob[2], ob[3]);
        }
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = n * 8 + 2 * quad + e % 2;
          ds[n][e] = p[n][e] * (ds[n][e] - tile_delta[row]);
        }
      }
      // dK += dS^T Q (scaled once at the end).
      mma_registers_by_tile<D>(dk_acc, ds, q_tile);
    }
    __syncthreads();  // this stage is the next prefetch's target
  }

  // Every key row of the tile is written (zeros where no query sees it). The Q stages are free.
  bf16* staging = q_tiles;
  stage_accumulator<D>(staging, dk_acc, warp_key0, g.scale, g.scale);
  stage_accumulator<D>(staging + kTileElements<D>, dv_acc, warp_key0, 1.0f, 1.0f);
  __syncthreads();
  store_tile<D>(dk, staging, b, s0, g.Tk, kv_head, g.Hkv);
  store_tile<D>(dv, staging + kTileElements<D>, b, s0, g.Tk, kv_head, g.Hkv);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    tc_backward_query_kernel(Geometry g, const bf16* __restrict__ dout, const bf16* __restrict__ q,
                             const bf16* __restrict__ k, const bf16* __restrict__ v,
                             const float* __restrict__ lse, const float* __restrict__ delta,
                             bf16* __restrict__ dq) {
  constexpr int kDSteps = D / 16, kOutTiles = D / 8;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared_raw);
  bf16* dout_tile = q_tile + kTileElements<D>;
  bf16* k_tiles = dout_tile + kTileElements<D>;    // two stages
  bf16* v_tiles = k_tiles + 2 * kTileElements<D>;  // two stages
  float* lse_rows = reinterpret_cast<float*>(v_tiles + 2 * kTileElements<D>);
  float* delta_rows = lse_rows + 2 * kTile;  // sized as in the key kernel; one stage used
  int32_t* query_ids = reinterpret_cast<int32_t*>(delta_rows + 2 * kTile);
  int32_t* key_ids = query_ids + kTile;  // two stages

  const int query_tiles = (g.Tq + kTile - 1) / kTile;
  const int t0 = (query_tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;
  const int b = blockIdx.y / g.Hq, h = blockIdx.y % g.Hq, kv_head = h / g.group;
  const int warp = threadIdx.x / 32, group_row = (threadIdx.x % 32) / 4;
  const int warp_row0 = warp * 16;
  const int last_row = min(t0 + kTile, g.Tq) - 1;
  const float scale_log2 = g.scale * kLog2e;

  const Range keys = keys_seen_by(g, g.q_offset + t0, g.q_offset + last_row);
  const int key_tiles = keys.end > keys.begin ? (keys.end - keys.begin + kTile - 1) / kTile : 0;

  float dq_acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) dq_acc[n][0] = dq_acc[n][1] = dq_acc[n][2] = dq_acc[n][3] = 0.0f;

  if (key_tiles > 0) {
    copy_tile_async<D>(q_tile, q, b, t0, g.Tq, h, g.Hq);
    copy_tile_async<D>(dout_tile, dout, b, t0, g.Tq, h, g.Hq);
    copy_tile_async<D>(k_tiles, k, b, keys.begin, g.Tk, kv_head, g.Hkv);
    copy_tile_async<D>(v_tiles, v, b, keys.begin, g.Tk, kv_head, g.Hkv);
    commit_async_copies();
    load_row_statistics(lse_rows, delta_rows, g, lse, delta, b, h, t0);
    if (g.doc_ids != nullptr) {
      load_document_ids(query_ids, g, b, g.q_offset, t0, g.Tq);
      load_document_ids(key_ids, g, b, g.k_offset, keys.begin, g.Tk);
    }
  }
  DocumentSpan query_docs{0, 0};
  for (int j = 0; j < key_tiles; ++j) {
    const int s0 = keys.begin + j * kTile, stage = j % 2;
    const bf16* k_tile = k_tiles + stage * kTileElements<D>;
    const bf16* v_tile = v_tiles + stage * kTileElements<D>;
    const int32_t* tile_key_ids = key_ids + stage * kTile;
    if (j + 1 < key_tiles) {
      const int next = s0 + kTile, other = 1 - stage;
      copy_tile_async<D>(k_tiles + other * kTileElements<D>, k, b, next, g.Tk, kv_head, g.Hkv);
      copy_tile_async<D>(v_tiles + other * kTileElements<D>, v, b, next, g.Tk, kv_head, g.Hkv);
      commit_async_copies();
      if (g.doc_ids != nullptr) load_document_ids(key_ids + other * kTile, g, b, g.k_offset, next, g.Tk);
      wait_async_copies<1>();
    } else {
      wait_async_copies<0>();
    }
    __syncthreads();
    if (j == 0 && g.doc_ids != nullptr) query_docs = document_span(query_ids);
    const DocumentSpan key_docs =
        g.doc_ids != nullptr ? document_span(tile_key_ids) : DocumentSpan{0, 0};
    const TilePlan plan = plan_tile(g, t0, s0, query_docs, key_docs);
    if (!plan.skip) {
      // S = Q K^T and dP = dO V^T (16 queries x 64 keys per warp).
      float p[8][4], ds[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[n][e] = ds[n][e] = 0.0f;
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) {
        uint32_t qa[4], oa[4];
        load_a<D>(qa, q_tile, warp_row0, d * 16);
        load_a<D>(oa, dout_tile, warp_row0, d * 16);
#pragma unroll
        for (int pair = 0; pair < 4; ++pair) {
          uint32_t kb[4], vb[4];
          load_b_rows_n<D>(kb, k_tile, pair * 16, d * 16);
          load_b_rows_n<D>(vb, v_tile, pair * 16, d * 16);
          mma_bf16(p[2 * pair], qa, kb[0], kb[1]);
          mma_bf16(p[2 * pair + 1], qa, kb[2], kb[3]);
          mma_bf16(ds[2 * pair], oa, vb[0], vb[1]);
          mma_bf16(ds[2 * pair + 1], oa, vb[2], vb[3]);
        }
      }
      // P, then dS = P (dP - delta).
      const uint32_t visible =
          plan.masked ? visible_bits(g, t0, s0, warp_row0, false, query_ids, tile_key_ids)
                      : 0xffffffffu;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = warp_row0 + group_row + 8 * (e / 2);
          const float prob =
              probability(p[n][e], scale_log2, lse_rows[row], (visible >> (4 * n + e)) & 1u);
          ds[n][e] = prob * (ds[n][e] - delta_rows[row]);
        }
      }
      // dQ += dS K (k-steps of 16 keys; scaled once at the end).
      mma_registers_by_tile<D>(dq_acc, ds, k_tile);
    }
    __syncthreads();  // this stage is the next prefetch's target
  }

  // dq rows are overwritten (zeros for rows that see no key); the Q tile is free now.
  stage_accumulator<D>(q_tile, dq_acc, warp_row0, g.scale, g.scale);
  __syncthreads();
  store_tile<D>(dq, q_tile, b, t0, g.Tq, h, g.Hq);
}

template <int D>
void launch_backward(const Geometry& g, const bf16* dout, const bf16* q, const bf16* k,
                     const bf16* v, const float* lse, const float* delta, bf16* dq, bf16* dk,
                     bf16* dv, cudaStream_t stream) {
  constexpr size_t shared_bytes = backward_shared_bytes<D>();
  static_assert(shared_bytes <= 227 * 1024, "the backward tiles fit sm_90's shared memory");
  CUDA_CHECK(cudaFuncSetAttribute(tc_backward_key_kernel<D>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared_bytes)));
  CUDA_CHECK(cudaFuncSetAttribute(tc_backward_query_kernel<D>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared_bytes)));
  const dim3 key_grid((g.Tk + kTile - 1) / kTile, g.B * g.Hkv);
  tc_backward_key_kernel<D><<<key_grid, kThreads, shared_bytes, stream>>>(g, dout, q, k, v, lse,
                                                                          delta, dk, dv);
  CUDA_CHECK_LAUNCH("attention_tc_backward_key_kernel");
  if (g.Tq == 0) return;
  const dim3 query_grid((g.Tq + kTile - 1) / kTile, g.B * g.Hq);
  tc_backward_query_kernel<D><<<query_grid, kThreads, shared_bytes, stream>>>(g, dout, q, k, v,
                                                                              lse, delta, dq);
  CUDA_CHECK_LAUNCH("attention_tc_backward_query_kernel");
}

}  // namespace
}  // namespace anvil::cuda_attention::tc

namespace anvil {

size_t cuda_attention_tc_backward_workspace(const Tensor& q) {
  ANVIL_CHECK(q.shape.rank() == 4, "[attention_backward] q must be rank 4, got {}", q.shape.str());
  return static_cast<size_t>(q.shape[0] * q.shape[2] * q.shape[1]) * sizeof(float);
}

void cuda_attention_tc_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& out, const Tensor& lse,
                                const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const AttentionParams& params, void* workspace,
                                cudaStream_t stream) {
  using namespace cuda_attention;
  using tc::bf16;
  const char* op = "attention_backward";
  const Geometry g = check_attention_args(op, q, k, params);
  ANVIL_CHECK(tensor_core_attention_supports(q, k, v, out, &dout, &dq, &dk, &dv),
              "[{}] the tensor-core kernel takes bf16 tensors with head dim 64 or 128 on 16-byte "
              "boundaries, got {} q {}",
              op, dtype_name(q.dtype), q.shape.str());
  if (g.B == 0 || g.Tk == 0 || g.Hkv == 0) return;  // nothing to write
  ANVIL_CHECK(workspace != nullptr || g.Tq == 0,
              "[{}] needs a workspace of {} bytes (cuda_attention_tc_backward_workspace)", op,
              cuda_attention_tc_backward_workspace(q));
  auto* delta = static_cast<float*>(workspace);
  if (g.Tq > 0) {
    const int64_t rows = static_cast<int64_t>(g.B) * g.Hq * g.Tq;
    constexpr int kDeltaThreads = 256;  // 8 rows per block
    const int64_t blocks = (rows * 32 + kDeltaThreads - 1) / kDeltaThreads;
    ANVIL_CHECK(blocks <= 0x7fffffff, "[{}] too many query rows ({})", op, rows);
    tc::tc_delta_kernel<<<static_cast<unsigned>(blocks), kDeltaThreads, 0, stream>>>(
        g, static_cast<const bf16*>(dout.data), static_cast<const bf16*>(out.data), delta);
    CUDA_CHECK_LAUNCH("attention_tc_delta_kernel");
  }
  const auto* dout_p = static_cast<const bf16*>(dout.data);
  const auto* q_p = static_cast<const bf16*>(q.data);
  const auto* k_p = static_cast<const bf16*>(k.data);
  const auto* v_p = static_cast<const bf16*>(v.data);
  auto* dq_p = static_cast<bf16*>(dq.data);
  auto* dk_p = static_cast<bf16*>(dk.data);
  auto* dv_p = static_cast<bf16*>(dv.data);
  if (g.D == 64) {
    tc::launch_backward<64>(g, dout_p, q_p, k_p, v_p, lse.f32(), delta, dq_p, dk_p, dv_p, stream);
  } else {
    tc::launch_backward<128>(g, dout_p, q_p, k_p, v_p, lse.f32(), delta, dq_p, dk_p, dv_p, stream);
  }
}

}  // namespace anvil
