// Flash-attention forward on tensor cores: bf16 q, k, v, out with head dim 64 or 128 (other
// head dims and f32 tensors keep the CUDA-core kernels of attention_forward.cu). One block of 4
// warps owns 64 query rows of one (batch, query head); each warp owns 16 of them. The block
// keeps Q in registers as mma fragments and streams 64-key tiles of K and V through two shared
// stages with cp.async (the next tile loads while this one computes). Per tile: S = Q K^T on
// tensor cores (f32 accumulate), the mask where the tile plan asks for one (attention_tiles.h
// skips hidden tiles and leaves fully visible ones unmasked; documents by id span), an online
// softmax in base 2 on the f32 scores, P rounded to bf16 in registers, O += P V. Rows with no
// visible key end with out = 0 and lse = -inf; lse is natural-log, as Backend defines it.
// Query tiles run last-first so the longest causal rows start first.
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_tc_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace anvil::cuda_attention::tc {
namespace {

// Shared bytes of the forward kernel: Q, two stages of K and V, document ids.
template <int D>
constexpr size_t forward_shared_bytes() {
  return static_cast<size_t>(5 * kTileElements<D>) * sizeof(bf16) +
         static_cast<size_t>(3 * kTile) * sizeof(int32_t);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    tc_forward_kernel(Geometry g, const bf16* __restrict__ q, const bf16* __restrict__ k,
                      const bf16* __restrict__ v, bf16* __restrict__ out, float* __restrict__ lse) {
  constexpr int kDSteps = D / 16;  // k-steps of S = Q K^T
  constexpr int kOutTiles = D / 8;  // n-tiles of O
  extern __shared__ __align__(16) unsigned char shared_raw[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared_raw);
  bf16* k_tiles = q_tile + kTileElements<D>;   // two stages
  bf16* v_tiles = k_tiles + 2 * kTileElements<D>;  // two stages
  int32_t* query_ids = reinterpret_cast<int32_t*>(v_tiles + 2 * kTileElements<D>);
  int32_t* key_ids = query_ids + kTile;  // two stages

  const int query_tiles = (g.Tq + kTile - 1) / kTile;
  const int t0 = (query_tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;
  const int b = blockIdx.y / g.Hq, h = blockIdx.y % g.Hq, kv_head = h / g.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group_row = lane / 4, quad = lane % 4;
  const int warp_row0 = warp * 16;
  const int last_row = min(t0 + kTile, g.Tq) - 1;
  const float scale_log2 = g.scale * kLog2e;

  const Range keys = keys_seen_by(g, g.q_offset + t0, g.q_offset + last_row);
  const int key_tiles = keys.end > keys.begin ? (keys.end - keys.begin + kTile - 1) / kTile : 0;

  float acc[kOutTiles][4];
#pragma unroll
  for (int n = 0; n < kOutTiles; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  // Running max (base-2 scaled scores) and this thread's part of the running sum, for rows
  // group_row and group_row + 8 of the warp.
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  uint32_t q_fragments[kDSteps][4];

  if (key_tiles > 0) {
    copy_tile_async<D>(q_tile, q, b, t0, g.Tq, h, g.Hq);
    copy_tile_async<D>(k_tiles, k, b, keys.begin, g.Tk, kv_head, g.Hkv);
    copy_tile_async<D>(v_tiles, v, b, keys.begin, g.Tk, kv_head, g.Hkv);
    commit_async_copies();
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
    if (j + 1 < key_tiles) {  // prefetch the next tile into the other stage
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
    if (j == 0) {
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) load_a<D>(q_fragments[d], q_tile, warp_row0, d * 16);
      if (g.doc_ids != nullptr) query_docs = document_span(query_ids);
    }
    const DocumentSpan key_docs =
        g.doc_ids != nullptr ? document_span(tile_key_ids) : DocumentSpan{0, 0};
    const TilePlan plan = plan_tile(g, t0, s0, query_docs, key_docs);
    if (!plan.skip) {
      // S (16 x 64 per warp) = Q K^T.
      float s[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) {
#pragma unroll
        for (int pair = 0; pair < 4; ++pair) {
          uint32_t kb[4];
          load_b_rows_n<D>(kb, k_tile, pair * 16, d * 16);
          mma_bf16(s[2 * pair], q_fragments[d], kb[0], kb[1]);
          mma_bf16(s[2 * pair + 1], q_fragments[d], kb[2], kb[3]);
        }
      }
      // Scale to base 2, mask, and take this tile's row maxima.
      const uint32_t visible =
          plan.masked ? visible_bits(g, t0, s0, warp_row0, false, query_ids, tile_key_ids)
                      : 0xffffffffu;
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int half = e / 2;
          const float x = (visible >> (4 * n + e)) & 1u ? s[n][e] * scale_log2 : -INFINITY;
          s[n][e] = x;
          tile_max[half] = fmaxf(tile_max[half], x);
        }
      }
      float rescale[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float m = tile_max[half];
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float new_max = fmaxf(row_max[half], m);
        // A row that has seen nothing yet keeps max -inf; subtract 0 then (exp2(-inf) = 0).
        const float base = new_max == -INFINITY ? 0.0f : new_max;
        rescale[half] = exp2f(row_max[half] - base);
        row_max[half] = new_max;
        row_sum[half] *= rescale[half];
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float p0 = exp2f(s[n][2 * half] - base), p1 = exp2f(s[n][2 * half + 1] - base);
          s[n][2 * half] = p0;
          s[n][2 * half + 1] = p1;
          row_sum[half] += p0 + p1;
        }
      }
#pragma unroll
      for (int n = 0; n < kOutTiles; ++n) {
        acc[n][0] *= rescale[0];
        acc[n][1] *= rescale[0];
        acc[n][2] *= rescale[1];
        acc[n][3] *= rescale[1];
      }
      // O += P V: the 16-key k-steps of P come straight from the score registers.
      mma_registers_by_tile<D>(acc, s, v_tile);
    }
    __syncthreads();  // this stage is the next prefetch's target
  }

  // Finish the rows: the quad's partial sums, then out = acc / sum and lse.
  float inverse[2], row_lse[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = row_sum[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inverse[half] = sum > 0.0f ? 1.0f / sum : 0.0f;
    row_lse[half] = sum > 0.0f ? (row_max[half] + log2f(sum)) * kLn2 : -INFINITY;
  }
  stage_accumulator<D>(q_tile, acc, warp_row0, inverse[0], inverse[1]);
  if (quad == 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = t0 + warp_row0 + group_row + 8 * half;
      if (t < g.Tq) lse[(static_cast<int64_t>(b) * g.Hq + h) * g.Tq + t] = row_lse[half];
    }
  }
  __syncthreads();
  store_tile<D>(out, q_tile, b, t0, g.Tq, h, g.Hq);
}

template <int D>
void launch_forward(const Geometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& out, const Tensor& lse, cudaStream_t stream) {
  constexpr size_t shared_bytes = forward_shared_bytes<D>();
  static_assert(shared_bytes <= 227 * 1024, "the forward tiles fit sm_90's shared memory");
  CUDA_CHECK(cudaFuncSetAttribute(tc_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared_bytes)));
  const dim3 grid((g.Tq + kTile - 1) / kTile, g.B * g.Hq);
  tc_forward_kernel<D><<<grid, kThreads, shared_bytes, stream>>>(
      g, static_cast<const bf16*>(q.data), static_cast<const bf16*>(k.data),
      static_cast<const bf16*>(v.data), static_cast<bf16*>(out.data), lse.f32());
  CUDA_CHECK_LAUNCH("attention_tc_forward_kernel");
}

}  // namespace
}  // namespace anvil::cuda_attention::tc

namespace anvil {

void cuda_attention_tc_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse,
                               const AttentionParams& params, cudaStream_t stream) {
  using namespace cuda_attention;
  const Geometry g = check_attention_args("attention", q, k, params);
  ANVIL_CHECK(tensor_core_attention_supports(q, k, v, out),
              "[attention] the tensor-core kernel takes bf16 tensors with head dim 64 or 128 "
              "on 16-byte boundaries, got {} q {}",
              dtype_name(q.dtype), q.shape.str());
  if (g.B == 0 || g.Tq == 0 || g.Hq == 0) return;
  if (g.D == 64) {
    tc::launch_forward<64>(g, q, k, v, out, lse, stream);
  } else {
    tc::launch_forward<128>(g, q, k, v, out, lse, stream);
  }
}

}  // namespace anvil
