// Flash-attention forward on CUDA cores (f32 arithmetic; bf16 or f32 tensors). One block of 128
// threads owns a tile of 32 query rows of one (batch, query head): it keeps the scaled Q tile
// in shared memory, streams the visible key tiles (K, then V, through one shared buffer),
// keeps an online softmax (running max and sum per row) and the output rows in registers, and
// never stores more than a 32 x 32 block of scores. GQA reads kv head h / group in place.
// Rows with no visible key end with out = 0 and lse = -inf. Also holds the CUDA-specific size
// checks (Backend checked the rest) shared with the backward pass. The router
// (attention_route.h) sends here what neither cuDNN nor the tensor-core kernels take: f32 or
// mixed-dtype tensors, head dims other than 64 and 128, unaligned views, or everything under
// ANVIL_CUDA_ATTENTION=simt.
#include <cmath>
#include <limits>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace anvil::cuda_attention {
namespace {

// Shared-memory floats used by the forward kernel for head-dim path DP.
constexpr size_t forward_shared_floats(int DP) {
  return static_cast<size_t>(kRowsPerTile + kKeysPerTile) * (DP + 1) +
         static_cast<size_t>(kRowsPerTile) * (kKeysPerTile + 1) + 3 * kRowsPerTile;
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Geometry g, DeviceFloats q, DeviceFloats k, DeviceFloats v,
                             DeviceFloats out, float* lse) {
  constexpr int kStride = DP + 1;
  constexpr int kScoreStride = kKeysPerTile + 1;
  constexpr int kOutPerThread = DP / 4;
  extern __shared__ float shared[];
  float* q_tile = shared;                                // Br x kStride, pre-scaled
  float* kv_tile = q_tile + kRowsPerTile * kStride;     // Bc x kStride: K, then V
  float* scores = kv_tile + kKeysPerTile * kStride;     // Br x kScoreStride: S, then P
  float* row_max = scores + kRowsPerTile * kScoreStride;
  float* row_sum = row_max + kRowsPerTile;
  float* row_rescale = row_sum + kRowsPerTile;

  const float neg_inf = -INFINITY;
  const int t0 = blockIdx.x * kRowsPerTile;
  const int b = blockIdx.y / g.Hq, h = blockIdx.y % g.Hq, kv_head = h / g.group;
  const int row = threadIdx.x / 4, quarter = threadIdx.x % 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = t0 + row;
  const int pos = g.q_offset + t;
  const int last_row = min(t0 + kRowsPerTile, g.Tq) - 1;

  load_tile<DP>(q_tile, q, b, t0, kRowsPerTile, h, g.Tq, g.Hq, g.D, g.scale);
  if (threadIdx.x < kRowsPerTile) {
    row_max[threadIdx.x] = neg_inf;
    row_sum[threadIdx.x] = 0.0f;
  }
  float acc[kOutPerThread];
#pragma unroll
  for (int j = 0; j < kOutPerThread; ++j) acc[j] = 0.0f;

  const Range keys = keys_seen_by(g, g.q_offset + t0, g.q_offset + last_row);
  for (int s0 = keys.begin; s0 < keys.end; s0 += kKeysPerTile) {
    __syncthreads();  // the previous tile's P and V are no longer read
    load_tile<DP>(kv_tile, k, b, s0, kKeysPerTile, kv_head, g.Tk, g.Hkv, g.D, 1.0f);
    __syncthreads();
    // S = Q K^T for this thread's row and its 8 columns (quarter, quarter + 4, ...).
#pragma unroll
    for (int j = 0; j < kColumnsPerThread; ++j) {
      const int c = quarter + 4 * j, s = s0 + c;
      float dot = 0.0f;
#pragma unroll 16
      for (int d = 0; d < DP; ++d) dot += q_tile[row * kStride + d] * kv_tile[c * kStride + d];
      const bool visible = t < g.Tq && s < keys.end && key_visible(g, b, pos, s);
      scores[row * kScoreStride + c] = visible ? dot : neg_inf;
    }
    __syncthreads();
    // Online softmax: warp w updates rows 8w .. 8w + 7, one key column per lane.
    for (int r = warp * 8; r < warp * 8 + 8; ++r) {
      const float x = scores[r * kScoreStride + lane];
      const float old_max = row_max[r];
      const float new_max = fmaxf(old_max, warp_max(x));
      const float p = x == neg_inf ? 0.0f : expf(x - new_max);
      const float tile_sum = warp_sum(p);
      scores[r * kScoreStride + lane] = p;
      __syncwarp();
      if (lane == 0) {
        const float rescale = old_max == neg_inf ? 0.0f : expf(old_max - new_max);
        row_rescale[r] = rescale;
        row_sum[r] = row_sum[r] * rescale + tile_sum;
        row_max[r] = new_max;
      }
    }
    __syncthreads();  // K is no longer read; P and the rescale factors are ready
    load_tile<DP>(kv_tile, v, b, s0, kKeysPerTile, kv_head, g.Tk, g.Hkv, g.D, 1.0f);
    __syncthreads();
    const float rescale = row_rescale[row];
#pragma unroll
    for (int j = 0; j < kOutPerThread; ++j) acc[j] *= rescale;
    for (int c = 0; c < kKeysPerTile; ++c) {
      const float p = scores[row * kScoreStride + c];
#pragma unroll
      for (int j = 0; j < kOutPerThread; ++j) acc[j] += p * kv_tile[c * kStride + quarter + 4 * j];
    }
  }
  __syncthreads();
  if (t >= g.Tq) return;
  const float sum = row_sum[row];
  const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int j = 0; j < kOutPerThread; ++j) {
    const int d = quarter + 4 * j;
    if (d < g.D) store_float(out, bthd_index(b, t, h, g.Tq, g.Hq, g.D, d), acc[j] * inv_sum);
  }
  if (quarter == 0) {
    lse[(static_cast<int64_t>(b) * g.Hq + h) * g.Tq + t] =
        sum > 0.0f ? row_max[row] + logf(sum) : neg_inf;
  }
}

template <int DP>
void launch_forward(const Geometry& g, DeviceFloats q, DeviceFloats k, DeviceFloats v,
                    DeviceFloats out, float* lse, cudaStream_t stream) {
  const dim3 grid((g.Tq + kRowsPerTile - 1) / kRowsPerTile, g.B * g.Hq);
  const size_t shared_bytes = forward_shared_floats(DP) * sizeof(float);
  static_assert(forward_shared_floats(128) * sizeof(float) <= 48 * 1024,
                "the forward tile fits the default shared-memory limit");
  attention_forward_kernel<DP><<<grid, kThreads, shared_bytes, stream>>>(g, q, k, v, out, lse);
  CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

}  // namespace

DeviceFloats device_floats(const Tensor& t) {
  return DeviceFloats{t.data, t.dtype == DType::bf16};
}

Geometry check_attention_args(const char* op, const Tensor& q, const Tensor& k,
                              const AttentionParams& params) {
  const int64_t B = q.shape[0], Tq = q.shape[1], Hq = q.shape[2], D = q.shape[3];
  const int64_t Tk = k.shape[1], Hkv = k.shape[2];
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  ANVIL_CHECK(B <= kIntMax && Tq <= kIntMax && Tk <= kIntMax && B * Hq <= 65535,
              "[{}] sizes too large for the CUDA kernels: q {}, k {}", op, q.shape.str(),
              k.shape.str());
  ANVIL_CHECK(D >= 1 && D <= kMaxHeadDim, "[{}] head dim must be in [1, {}] on CUDA, got {}",
              op, kMaxHeadDim, D);
  Geometry g;
  g.B = static_cast<int>(B);
  g.Tq = static_cast<int>(Tq);
  g.Tk = static_cast<int>(Tk);
  g.Hq = static_cast<int>(Hq);
  g.Hkv = static_cast<int>(Hkv);
  g.D = static_cast<int>(D);
  g.group = static_cast<int>(Hq / Hkv);
  g.q_offset = params.q_offset;
  g.k_offset = params.k_offset;
  g.rule = params.mask_rule();
  if (params.doc_ids != nullptr) {
    const Tensor& doc = *params.doc_ids;
    g.doc_ids = static_cast<const int32_t*>(doc.data);
    g.doc_len = static_cast<int>(doc.shape[1]);
  }
  g.scale = params.scale != 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(D));
  return g;
}

}  // namespace anvil::cuda_attention

namespace anvil {

void cuda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const AttentionParams& params,
                            cudaStream_t stream) {
  using namespace cuda_attention;
  const char* op = "attention";
  const Geometry g = check_attention_args(op, q, k, params);
  if (g.B == 0 || g.Tq == 0 || g.Hq == 0) return;
  const DeviceFloats qf = device_floats(q);
  const DeviceFloats kf = device_floats(k);
  const DeviceFloats vf = device_floats(v);
  const DeviceFloats outf = device_floats(out);
  if (g.D <= 64) {
    launch_forward<64>(g, qf, kf, vf, outf, lse.f32(), stream);
  } else {
    launch_forward<128>(g, qf, kf, vf, outf, lse.f32(), stream);
  }
}

}  // namespace anvil
