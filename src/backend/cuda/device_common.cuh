// Device-side helpers shared by the CUDA backend's kernels: loading any float storage dtype
// (f32, bf16, f16) as f32 and storing f32 back with round-to-nearest-even exactly as
// core/dtype.h does on the host (so bf16 results match the CPU bit for bit), block reductions,
// and launch-size helpers. Kernels index with int64_t: tensors may exceed 2^31 elements.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_ops.h"

namespace anvil::cuda {

inline constexpr int kBlockSize = 256;
// Grid-stride kernels never use more blocks than this; each thread then loops.
inline constexpr int64_t kMaxGridBlocks = 8192;

// Returns the number of blocks for `n` elements at kBlockSize threads, at least 1.
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kBlockSize - 1) / kBlockSize;
  if (blocks < 1) return 1;
  return static_cast<unsigned>(blocks > kMaxGridBlocks ? kMaxGridBlocks : blocks);
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Rounds to bf16 as core/dtype.h's float_to_bf16: nearest even, NaN kept quiet.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  uint32_t u = __float_as_uint(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float load_float(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::bf16: return bf16_bits_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

__device__ __forceinline__ void store_float(void* data, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::bf16: static_cast<uint16_t*>(data)[i] = float_to_bf16_bits(value); break;
    case DType::f16: static_cast<__half*>(data)[i] = __float2half_rn(value); break;
    default: static_cast<float*>(data)[i] = value; break;
  }
}

__device__ __forceinline__ float load_float(ConstArray a, int64_t i) {
  return load_float(a.data, a.dtype, i);
}
__device__ __forceinline__ void store_float(MutableArray a, int64_t i, float value) {
  store_float(a.data, a.dtype, i, value);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Returns the sum of `value` over the block (every thread gets it); blockDim.x is a multiple
// of 32 and at most 1024. The reduction order is fixed, so results are deterministic.
template <typename T>
__device__ T block_sum(T value) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  value = warp_sum(value);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / 32;
  T total = lane < warps ? partial[lane] : T(0);
  return warp_sum(total);
}

// Returns the maximum of `value` over the block (every thread gets it).
__device__ inline float block_max(float value) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  const int warps = blockDim.x / 32;
  const float total = lane < warps ? partial[lane] : -INFINITY;
  return warp_max(total);
}

}  // namespace anvil::cuda
