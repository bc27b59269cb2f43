// Flash-attention backward on CUDA cores (f32 arithmetic; bf16 or f32 tensors), in three
// launches on one stream:
//   1. delta[b, h, t] = dout_t . out_t (f32, into the workspace), and dq_accum zeroed;
//   2. one block of 128 threads per (32-key tile, batch, kv head): it holds K and V of its keys
//      in shared memory and dK, dV in registers, loops over every query head of its GQA group
//      and every query tile that can see its keys, recomputes P = exp(S - lse) from the saved
//      lse, forms dS = P * (dP - delta) * scale, accumulates dV += P^T dO and dK += dS^T Q, and
//      adds dQ = dS K into the f32 workspace with atomicAdd (so dq's last bits may vary from
//      run to run; dk and dv are deterministic because one block owns each key row);
//   3. dq = dq_accum converted to dq's dtype.
// No (T x T) matrix is stored: scores live in 32 x 32 shared tiles. Serves the calls the
// router (attention_route.h) gives no faster path, as the forward file says; the tensor-core
// backward (attention_tc_backward.cu) has no atomics.
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace anvil::cuda_attention {
namespace {

constexpr size_t kWorkspaceAlignment = 256;

// Shared-memory floats used by the backward kernel for head-dim path DP.
constexpr size_t backward_shared_floats(int DP) {
  return static_cast<size_t>(2 * kKeysPerTile + 2 * kRowsPerTile) * (DP + 1) +
         static_cast<size_t>(2 * kRowsPerTile) * (kKeysPerTile + 1) + 2 * kRowsPerTile;
}

// Returns the byte size of the delta array, padded so dq_accum starts aligned.
size_t delta_bytes(int64_t B, int64_t Hq, int64_t Tq) {
  const size_t bytes = static_cast<size_t>(B * Hq * Tq) * sizeof(float);
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// delta (B, Hq, Tq) = rowsum(dout * out); one warp per query row.
__global__ void attention_delta_kernel(Geometry g, DeviceFloats dout, DeviceFloats out,
                                       float* delta) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = static_cast<int64_t>(g.B) * g.Hq * g.Tq;
  if (row >= rows) return;  // whole warps leave together: rows map to warps
  const int t = static_cast<int>(row % g.Tq);
  const int h = static_cast<int>(row / g.Tq % g.Hq);
  const int b = static_cast<int>(row / (static_cast<int64_t>(g.Tq) * g.Hq));
  const int64_t base = bthd_index(b, t, h, g.Tq, g.Hq, g.D, 0);
  float sum = 0.0f;
  for (int d = lane; d < g.D; d += 32) sum += load_float(dout, base + d) * load_float(out, base + d);
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

// dq = dq_accum in dq's dtype (same (B, Tq, Hq, D) layout).
__global__ void attention_store_dq_kernel(const float* dq_accum, DeviceFloats dq, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) store_float(dq, i, dq_accum[i]);
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kernel(Geometry g, DeviceFloats dout, DeviceFloats q, DeviceFloats k,
                              DeviceFloats v, const float* lse, const float* delta,
                              float* dq_accum, DeviceFloats dk, DeviceFloats dv) {
  constexpr int kStride = DP + 1;
  constexpr int kScoreStride = kKeysPerTile + 1;
  constexpr int kPerThread = DP / 4;
  extern __shared__ float shared[];
  float* k_tile = shared;                                // Bc x kStride
  float* v_tile = k_tile + kKeysPerTile * kStride;       // Bc x kStride
  float* q_tile = v_tile + kKeysPerTile * kStride;       // Br x kStride
  float* dout_tile = q_tile + kRowsPerTile * kStride;    // Br x kStride
  float* p_tile = dout_tile + kRowsPerTile * kStride;    // Br x kScoreStride
  float* ds_tile = p_tile + kRowsPerTile * kScoreStride; // Br x kScoreStride
  float* lse_rows = ds_tile + kRowsPerTile * kScoreStride;
  float* delta_rows = lse_rows + kRowsPerTile;

  const float neg_inf = -INFINITY;
  const int s0 = blockIdx.x * kKeysPerTile;
  const int b = blockIdx.y / g.Hkv, kv_head = blockIdx.y % g.Hkv;
  const int row = threadIdx.x / 4, quarter = threadIdx.x % 4;
  const int last_key = min(s0 + kKeysPerTile, g.Tk) - 1;

  load_tile<DP>(k_tile, k, b, s0, kKeysPerTile, kv_head, g.Tk, g.Hkv, g.D, 1.0f);
  load_tile<DP>(v_tile, v, b, s0, kKeysPerTile, kv_head, g.Tk, g.Hkv, g.D, 1.0f);
  float dk_acc[kPerThread], dv_acc[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) dk_acc[j] = dv_acc[j] = 0.0f;

  const Range rows = query_rows_seeing(g, s0, last_key);
  for (int h = kv_head * g.group; h < (kv_head + 1) * g.group; ++h) {
    for (int t0 = rows.begin; t0 < rows.end; t0 += kRowsPerTile) {
      __syncthreads();  // the previous tile's Q, dO, P and dS are no longer read
      load_tile<DP>(q_tile, q, b, t0, kRowsPerTile, h, g.Tq, g.Hq, g.D, 1.0f);
      load_tile<DP>(dout_tile, dout, b, t0, kRowsPerTile, h, g.Tq, g.Hq, g.D, 1.0f);
      if (threadIdx.x < kRowsPerTile) {
        const int t = t0 + threadIdx.x;
        const int64_t at = (static_cast<int64_t>(b) * g.Hq + h) * g.Tq + t;
        const bool live = t < rows.end;
        lse_rows[threadIdx.x] = live ? lse[at] : neg_inf;
        delta_rows[threadIdx.x] = live ? delta[at] : 0.0f;
      }
      __syncthreads();
      // P and dS for this thread's query row and its 8 key columns.
      const int t = t0 + row, pos = g.q_offset + t;
      const float row_lse = lse_rows[row], row_delta = delta_rows[row];
#pragma unroll
      for (int j = 0; j < kColumnsPerThread; ++j) {
        const int c = quarter + 4 * j, s = s0 + c;
        float p = 0.0f, ds = 0.0f;
        if (row_lse != neg_inf && s <= last_key && key_visible(g, b, pos, s)) {
          float qk = 0.0f, dp = 0.0f;
#pragma unroll 16
          for (int d = 0; d < DP; ++d) {
            qk += q_tile[row * kStride + d] * k_tile[c * kStride + d];
            dp += dout_tile[row * kStride + d] * v_tile[c * kStride + d];
          }
          p = expf(qk * g.scale - row_lse);
          ds = p * (dp - row_delta) * g.scale;
        }
        p_tile[row * kScoreStride + c] = p;
        ds_tile[row * kScoreStride + c] = ds;
      }
      __syncthreads();
      // dV += P^T dO and dK += dS^T Q for key row `row` of this tile.
      for (int r = 0; r < kRowsPerTile; ++r) {
        const float p = p_tile[r * kScoreStride + row], ds = ds_tile[r * kScoreStride + row];
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
          const int d = quarter + 4 * j;
          dv_acc[j] += p * dout_tile[r * kStride + d];
          dk_acc[j] += ds * q_tile[r * kStride + d];
        }
      }
      // dQ (query row `row`) += dS K, added into the f32 workspace.
      if (t < rows.end) {
        float dq_part[kPerThread];
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) dq_part[j] = 0.0f;
        for (int c = 0; c < kKeysPerTile; ++c) {
          const float ds = ds_tile[row * kScoreStride + c];
#pragma unroll
          for (int j = 0; j < kPerThread; ++j) dq_part[j] += ds * k_tile[c * kStride + quarter + 4 * j];
        }
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
          const int d = quarter + 4 * j;
          if (d < g.D) atomicAdd(dq_accum + bthd_index(b, t, h, g.Tq, g.Hq, g.D, d), dq_part[j]);
        }
      }
    }
  }
  const int s = s0 + row;
  if (s > last_key) return;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int d = quarter + 4 * j;
    if (d >= g.D) continue;
    const int64_t at = bthd_index(b, s, kv_head, g.Tk, g.Hkv, g.D, d);
    store_float(dk, at, dk_acc[j]);
    store_float(dv, at, dv_acc[j]);
  }
}

template <int DP>
void launch_backward(const Geometry& g, DeviceFloats dout, DeviceFloats q, DeviceFloats k,
                     DeviceFloats v, const float* lse, const float* delta, float* dq_accum,
                     DeviceFloats dk, DeviceFloats dv, cudaStream_t stream) {
  const size_t shared_bytes = backward_shared_floats(DP) * sizeof(float);
  // Above 48 KiB a kernel must opt in to the larger shared-memory carve-out (sm_90: 227 KiB).
  CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel<DP>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(shared_bytes)));
  const dim3 grid((g.Tk + kKeysPerTile - 1) / kKeysPerTile, g.B * g.Hkv);
  attention_backward_kernel<DP><<<grid, kThreads, shared_bytes, stream>>>(
      g, dout, q, k, v, lse, delta, dq_accum, dk, dv);
  CUDA_CHECK_LAUNCH("attention_backward_kernel");
}

}  // namespace
}  // namespace anvil::cuda_attention

namespace anvil {

size_t cuda_attention_backward_workspace(const Tensor& q, const Tensor& k) {
  ANVIL_CHECK(q.shape.rank() == 4 && k.shape.rank() == 4,
              "[attention_backward] q and k must be rank 4, got {} and {}", q.shape.str(),
              k.shape.str());
  const int64_t B = q.shape[0], Tq = q.shape[1], Hq = q.shape[2], D = q.shape[3];
  return cuda_attention::delta_bytes(B, Hq, Tq) + static_cast<size_t>(B * Tq * Hq * D) * sizeof(float);
}

void cuda_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& out, const Tensor& lse,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const AttentionParams& params, void* workspace,
                             cudaStream_t stream) {
  using namespace cuda_attention;
  const char* op = "attention_backward";
  const Geometry g = check_attention_args(op, q, k, params);
  const DeviceFloats dout_f = device_floats(dout);
  const DeviceFloats dq_f = device_floats(dq);
  const DeviceFloats dk_f = device_floats(dk);
  const DeviceFloats dv_f = device_floats(dv);
  if (g.B == 0 || g.Tk == 0 || g.Hkv == 0) return;  // nothing to write
  ANVIL_CHECK(workspace != nullptr || g.Tq == 0,
              "[{}] needs a workspace of {} bytes (cuda_attention_backward_workspace)", op,
              cuda_attention_backward_workspace(q, k));
  const int64_t q_elements = q.numel();
  float* delta = static_cast<float*>(workspace);
  float* dq_accum = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                             delta_bytes(g.B, g.Hq, g.Tq));
  if (g.Tq > 0) {
    const int64_t rows = static_cast<int64_t>(g.B) * g.Hq * g.Tq;
    constexpr int kDeltaThreads = 256;  // 8 rows per block
    const int64_t blocks = (rows * 32 + kDeltaThreads - 1) / kDeltaThreads;
    ANVIL_CHECK(blocks <= 0x7fffffff, "[{}] too many query rows ({})", op, rows);
    attention_delta_kernel<<<static_cast<unsigned>(blocks), kDeltaThreads, 0, stream>>>(
        g, dout_f, device_floats(out), delta);
    CUDA_CHECK_LAUNCH("attention_delta_kernel");
    CUDA_CHECK(cudaMemsetAsync(
        dq_accum, 0, static_cast<size_t>(q_elements) * sizeof(float), stream));
  }
  const DeviceFloats qf = device_floats(q);
  const DeviceFloats kf = device_floats(k);
  const DeviceFloats vf = device_floats(v);
  if (g.D <= 64) {
    launch_backward<64>(g, dout_f, qf, kf, vf, lse.f32(), delta, dq_accum, dk_f, dv_f, stream);
  } else {
    launch_backward<128>(g, dout_f, qf, kf, vf, lse.f32(), delta, dq_accum, dk_f, dv_f, stream);
  }
  if (g.Tq > 0) {
    constexpr int kStoreThreads = 256;
    const int64_t blocks = (q_elements + kStoreThreads - 1) / kStoreThreads;
    ANVIL_CHECK(blocks <= 0x7fffffff, "[{}] dq too large ({} elements)", op, q_elements);
    attention_store_dq_kernel<<<static_cast<unsigned>(blocks), kStoreThreads, 0, stream>>>(
        dq_accum, dq_f, q_elements);
    CUDA_CHECK_LAUNCH("attention_store_dq_kernel");
  }
}

}  // namespace anvil
