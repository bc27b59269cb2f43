// Typed, vectorized loads and stores for the memory-bound kernels. A kernel takes each
// tensor's storage type as a template tag (F32, Bf16, F16, or AnyFloat: the dtype read at run
// time, for the rare mixed-dtype calls) and moves its elements in packs of kPackElements (8):
// one 16-byte access for bf16/f16, two for f32. A Pack (kernel_plan.h) says which of the 8
// lanes are inside the tensor and whether the pack is aligned for 16-byte access; other packs
// (heads and tails of unaligned or odd-sized ranges) go element by element, with the same
// arithmetic, so a result never depends on the path. Conversions round as core/dtype.h does
// (device_common.cuh's float_to_bf16_bits), so values match the CPU bit for bit.
#pragma once

#include <cuda_fp16.h>

#include <initializer_list>
#include <type_traits>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernel_plan.h"

namespace anvil::cuda {

// Storage tags: a kernel template parameter per tensor.
struct F32 {};
struct Bf16 {};
struct F16 {};
struct AnyFloat {};  // f32, bf16 or f16, chosen per access from the array's dtype

// Returns element i of `data` (stored as Tag, or as `dtype` for AnyFloat) widened to f32.
template <class Tag>
__device__ __forceinline__ float load1(const void* data, DType dtype, int64_t i) {
  if constexpr (std::is_same_v<Tag, F32>) {
    return static_cast<const float*>(data)[i];
  } else if constexpr (std::is_same_v<Tag, Bf16>) {
    return bf16_bits_to_float(static_cast<const uint16_t*>(data)[i]);
  } else if constexpr (std::is_same_v<Tag, F16>) {
    return __half2float(static_cast<const __half*>(data)[i]);
  } else {
    return load_float(data, dtype, i);
  }
}

// Stores `value` rounded to the storage type into element i.
template <class Tag>
__device__ __forceinline__ void store1(void* data, DType dtype, int64_t i, float value) {
  if constexpr (std::is_same_v<Tag, F32>) {
    static_cast<float*>(data)[i] = value;
  } else if constexpr (std::is_same_v<Tag, Bf16>) {
    static_cast<uint16_t*>(data)[i] = float_to_bf16_bits(value);
  } else if constexpr (std::is_same_v<Tag, F16>) {
    static_cast<__half*>(data)[i] = __float2half_rn(value);
  } else {
    store_float(data, dtype, i, value);
  }
}

// Returns `value` as storing it and loading it back would give (the rounding of a store).
template <class Tag>
__device__ __forceinline__ float round1(DType dtype, float value) {
  if constexpr (std::is_same_v<Tag, F32>) {
    return value;
  } else if constexpr (std::is_same_v<Tag, Bf16>) {
    return bf16_bits_to_float(float_to_bf16_bits(value));
  } else if constexpr (std::is_same_v<Tag, F16>) {
    return __half2float(__float2half_rn(value));
  } else {
    switch (dtype) {
      case DType::bf16: return round1<Bf16>(dtype, value);
      case DType::f16: return round1<F16>(dtype, value);
      default: return value;
    }
  }
}

// Splits a 32-bit word into its two 16-bit halves as floats (element 2k is the low half:
// little-endian), and packs two floats into one word the other way.
__device__ __forceinline__ void unpack_bf16x2(uint32_t word, float& low, float& high) {
  low = __uint_as_float(word << 16);
  high = __uint_as_float(word & 0xffff0000u);
}
__device__ __forceinline__ void unpack_f16x2(uint32_t word, float& low, float& high) {
  low = __half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu)));
  high = __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16)));
}
__device__ __forceinline__ uint32_t pack_bf16x2(float low, float high) {
  return static_cast<uint32_t>(float_to_bf16_bits(low)) |
         (static_cast<uint32_t>(float_to_bf16_bits(high)) << 16);
}
__device__ __forceinline__ uint32_t pack_f16x2(float low, float high) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(low))) |
         (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(high))) << 16);
}

// Loads elements [first, first + 8) with 16-byte accesses; the caller guarantees alignment.
template <class Tag>
__device__ __forceinline__ void load8(const void* data, DType dtype, int64_t first,
                                      float (&v)[kPackElements]) {
  if constexpr (std::is_same_v<Tag, F32>) {
    const float4* at = reinterpret_cast<const float4*>(static_cast<const float*>(data) + first);
    const float4 a = at[0], b = at[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
    v[7] = b.w;
  } else if constexpr (std::is_same_v<Tag, Bf16> || std::is_same_v<Tag, F16>) {
    const uint4 words =
        *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(data) + first);
    const uint32_t w[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (std::is_same_v<Tag, Bf16>)
        unpack_bf16x2(w[k], v[2 * k], v[2 * k + 1]);
      else
        unpack_f16x2(w[k], v[2 * k], v[2 * k + 1]);
    }
  } else {
    switch (dtype) {
      case DType::bf16: return load8<Bf16>(data, dtype, first, v);
      case DType::f16: return load8<F16>(data, dtype, first, v);
      default: return load8<F32>(data, dtype, first, v);
    }
  }
}

// Stores v into elements [first, first + 8) with 16-byte accesses (alignment as load8).
template <class Tag>
__device__ __forceinline__ void store8(void* data, DType dtype, int64_t first,
                                       const float (&v)[kPackElements]) {
  if constexpr (std::is_same_v<Tag, F32>) {
    float4* at = reinterpret_cast<float4*>(static_cast<float*>(data) + first);
    at[0] = make_float4(v[0], v[1], v[2], v[3]);
    at[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else if constexpr (std::is_same_v<Tag, Bf16> || std::is_same_v<Tag, F16>) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (std::is_same_v<Tag, Bf16>)
        w[k] = pack_bf16x2(v[2 * k], v[2 * k + 1]);
      else
        w[k] = pack_f16x2(v[2 * k], v[2 * k + 1]);
    }
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(data) + first) =
        make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    switch (dtype) {
      case DType::bf16: return store8<Bf16>(data, dtype, first, v);
      case DType::f16: return store8<F16>(data, dtype, first, v);
      default: return store8<F32>(data, dtype, first, v);
    }
  }
}

// Loads a pack's lanes (0 outside [lo, hi)).
template <class Tag>
__device__ __forceinline__ void load_pack(const void* data, DType dtype, const Pack& p,
                                          float (&v)[kPackElements]) {
  if (p.vector) return load8<Tag>(data, dtype, p.first, v);
#pragma unroll
  for (int lane = 0; lane < kPackElements; ++lane)
    v[lane] = p.holds(lane) ? load1<Tag>(data, dtype, p.first + lane) : 0.0f;
}

// Stores a pack's lanes inside [lo, hi).
template <class Tag>
__device__ __forceinline__ void store_pack(void* data, DType dtype, const Pack& p,
                                           const float (&v)[kPackElements]) {
  if (p.vector) return store8<Tag>(data, dtype, p.first, v);
#pragma unroll
  for (int lane = 0; lane < kPackElements; ++lane)
    if (p.holds(lane)) store1<Tag>(data, dtype, p.first + lane, v[lane]);
}

// The same on the launchers' arrays.
template <class Tag>
__device__ __forceinline__ void load_pack(ConstArray a, const Pack& p, float (&v)[kPackElements]) {
  load_pack<Tag>(a.data, a.dtype, p, v);
}
template <class Tag>
__device__ __forceinline__ void load_pack(MutableArray a, const Pack& p,
                                          float (&v)[kPackElements]) {
  load_pack<Tag>(a.data, a.dtype, p, v);
}
template <class Tag>
__device__ __forceinline__ void store_pack(MutableArray a, const Pack& p,
                                           const float (&v)[kPackElements]) {
  store_pack<Tag>(a.data, a.dtype, p, v);
}

// Rounds every lane as a store to the storage type would.
template <class Tag>
__device__ __forceinline__ void round_pack(DType dtype, float (&v)[kPackElements]) {
#pragma unroll
  for (int lane = 0; lane < kPackElements; ++lane) v[lane] = round1<Tag>(dtype, v[lane]);
}

// Returns the array as kernel_plan.h's planners see it (host).
inline AccessedArray accessed(ConstArray a) { return {a.data, dtype_size(a.dtype)}; }
inline AccessedArray accessed(MutableArray a) { return {a.data, dtype_size(a.dtype)}; }

// The storage type every array of a call shares, to pick a kernel instantiation (host):
// f32, bf16, or other (f16 or a mix: the AnyFloat instantiation).
enum class UniformStorage { f32, bf16, other };
inline UniformStorage uniform_storage(std::initializer_list<DType> dtypes) {
  const DType first = *dtypes.begin();
  for (DType d : dtypes)
    if (d != first) return UniformStorage::other;
  if (first == DType::f32) return UniformStorage::f32;
  return first == DType::bf16 ? UniformStorage::bf16 : UniformStorage::other;
}

// Grid-stride index helpers.
__device__ __forceinline__ int64_t global_thread() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return int64_t{gridDim.x} * blockDim.x; }

}  // namespace anvil::cuda
