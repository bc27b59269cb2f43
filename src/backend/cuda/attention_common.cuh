// Shared pieces of the CUDA flash-attention kernels (attention_forward.cu, attention_backward.cu):
// tile sizes, the geometry every kernel reads, element loads/stores for f32 or bf16 tensors
// chosen at run time (one uniform branch per element; it keeps one instantiation per head-dim
// path instead of one per dtype combination, which keeps the CI build short), the mask test,
// the key/query ranges a tile can see, and the host-side argument checks. Positions are
// absolute (query row t sits at q_offset + t, key row s at k_offset + s), as in
// Backend::attention_forward.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace anvil::cuda_attention {

inline constexpr int kRowsPerTile = 32;  // query rows per tile (Br)
inline constexpr int kKeysPerTile = 32;  // key rows per tile (Bc)
inline constexpr int kThreads = 128;     // 4 warps; thread i owns tile row i / 4
inline constexpr int kColumnsPerThread = kKeysPerTile / 4;
inline constexpr int kMaxHeadDim = 128;
static_assert(kThreads == 4 * kRowsPerTile && kThreads == 4 * kKeysPerTile,
              "each tile row is shared by exactly four threads");

// A float tensor as the kernels see it: device pointer and whether it holds bf16 (else f32).
struct DeviceFloats {
  void* data = nullptr;
  bool bf16 = false;
};

// Problem sizes and mask parameters, copied into every kernel launch.
struct Geometry {
  int B = 0, Tq = 0, Tk = 0, Hq = 0, Hkv = 0, D = 0;
  int group = 1;  // query heads per kv head
  int q_offset = 0;  // absolute position of query row 0
  int k_offset = 0;  // absolute position of key row 0
  MaskRule rule;
  const int32_t* doc_ids = nullptr;  // (B, doc_len) by absolute position on the device, or null
  int doc_len = 0;
  float scale = 1.0f;
};

// Returns element i of t as f32.
__device__ __forceinline__ float load_float(DeviceFloats t, int64_t i) {
  if (t.bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(t.data)[i]);
  return static_cast<const float*>(t.data)[i];
}

// Stores v into element i of t, rounding to nearest even for bf16.
__device__ __forceinline__ void store_float(DeviceFloats t, int64_t i, float v) {
  if (t.bf16) {
    static_cast<__nv_bfloat16*>(t.data)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(t.data)[i] = v;
  }
}

// Returns the flat index of element d of row t, head h, batch b in a (B, T, H, D) tensor.
__device__ __forceinline__ int64_t bthd_index(int b, int t, int h, int T, int H, int D, int d) {
  return ((static_cast<int64_t>(b) * T + t) * H + h) * D + d;
}

// Copies rows [row0, row0 + rows) of head h, batch b of a (B, T, H, D) tensor into a
// (rows x DP) shared tile with row stride DP + 1, times `multiplier`; rows past T and columns
// past D are zero.
template <int DP>
__device__ void load_tile(float* tile, DeviceFloats src, int b, int row0, int rows, int h, int T,
                          int H, int D, float multiplier) {
  for (int e = threadIdx.x; e < rows * DP; e += kThreads) {
    const int r = e / DP, d = e % DP, t = row0 + r;
    float x = 0.0f;
    if (t < T && d < D) x = load_float(src, bthd_index(b, t, h, T, H, D, d)) * multiplier;
    tile[r * (DP + 1) + d] = x;
  }
}

// Returns whether the query at absolute position pos of batch row b may attend to key row s
// (the same rule as the CPU reference: backend/attention_mask.h, then the documents).
__device__ __forceinline__ bool key_visible(const Geometry& g, int b, int pos, int s) {
  const int key_pos = g.k_offset + s;
  if (!position_visible(g.rule, pos, key_pos)) return false;
  if (g.doc_ids != nullptr) {
    const int32_t* doc = g.doc_ids + static_cast<int64_t>(b) * g.doc_len;
    if (doc[pos] != doc[key_pos]) return false;
  }
  return true;
}

// Returns the sum of v over the 32 lanes of a warp.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Returns the maximum of v over the 32 lanes of a warp.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Half-open ranges [begin, end): of key rows visible to queries at positions [first, last],
// and of query rows that can see key rows [first, last]. Causal and window masks only (the
// window only without sinks); the sparse pattern and the documents are applied per element.
struct Range {
  int begin;
  int end;
};

__host__ __device__ inline Range keys_seen_by(const Geometry& g, int first_pos, int last_pos) {
  int begin = g.k_offset, end = g.k_offset + g.Tk;  // positions
  if (g.rule.causal && last_pos + 1 < end) end = last_pos + 1;
  if (g.rule.window > 0 && g.rule.sinks == 0) {
    const int lowest = first_pos - g.rule.window + 1;
    if (lowest > begin) begin = lowest;
    if (!g.rule.causal && last_pos + g.rule.window < end) end = last_pos + g.rule.window;
  }
  begin -= g.k_offset;
  end -= g.k_offset;
  return Range{begin, end > begin ? end : begin};
}

__host__ __device__ inline Range query_rows_seeing(const Geometry& g, int first_key,
                                                   int last_key) {
  first_key += g.k_offset;
  last_key += g.k_offset;
  int pos_begin = g.q_offset, pos_end = g.q_offset + g.Tq;
  if (g.rule.causal && first_key > pos_begin) pos_begin = first_key;
  if (g.rule.window > 0 && first_key >= g.rule.sinks) {
    if (last_key + g.rule.window < pos_end) pos_end = last_key + g.rule.window;
    if (!g.rule.causal && first_key - g.rule.window + 1 > pos_begin)
      pos_begin = first_key - g.rule.window + 1;
  }
  if (pos_end < pos_begin) pos_end = pos_begin;
  return Range{pos_begin - g.q_offset, pos_end - g.q_offset};
}

// Checks the CUDA kernels' size limits (Backend has checked shapes, dtypes and parameters)
// and returns the geometry (scale resolved). `op` names the operation in messages.
Geometry check_attention_args(const char* op, const Tensor& q, const Tensor& k,
                              const AttentionParams& params);
// Returns the kernel view of an f32 or bf16 tensor.
DeviceFloats device_floats(const Tensor& t);

}  // namespace anvil::cuda_attention
