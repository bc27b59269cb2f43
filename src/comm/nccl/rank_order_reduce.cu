// The rank-order sum and max on the device (see rank_order_reduce.h). One thread owns an
// element and walks the rows r = 0 .. ranks-1, so the additions happen in the serial order and
// nothing can reassociate them; f32 adds are __fadd_rn (never fused or flushed) and the
// conversions are the host's: bf16 by the same bit arithmetic as core/dtype.h, f16 through
// the hardware's round-to-nearest-even, which equals core/dtype.h's float_to_f16 for every
// value but NaN, and NaN never reaches it (a NaN total becomes the canonical quiet NaN first).
#include <cuda_fp16.h>

#include "backend/cuda/device_common.cuh"
#include "comm/nccl/nccl_runtime.h"
#include "comm/nccl/rank_order_reduce.h"
#include "comm/reduce_kernels.h"
#include "core/error.h"

namespace anvil::nccl {
namespace {

using cuda::float_to_bf16_bits;
using cuda::grid_for;
using cuda::kBlockSize;

// The rows of DeviceRows with their element type, as the kernels read them.
template <typename T>
struct Rows {
  const T* received;
  int64_t stride;
  const T* own;
  int own_rank;
  int ranks;

  explicit Rows(const DeviceRows& rows)
      : received(static_cast<const T*>(rows.received)),
        stride(rows.stride),
        own(static_cast<const T*>(rows.own)),
        own_rank(rows.own_rank),
        ranks(rows.ranks) {}
  __device__ T at(int rank, int64_t i) const {
    if (rank == own_rank) return own[i];
    return received[(rank < own_rank ? rank : rank - 1) * stride + i];
  }
};

// The 16-bit float formats: widening (exact) and rounding of an f32 total, NaN canonical.
struct Bf16 {
  __device__ static float widen(uint16_t bits) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  }
  __device__ static uint16_t round(float total) {
    return isnan(total) ? kCanonicalNanBf16 : float_to_bf16_bits(total);
  }
  static constexpr uint16_t kNan = kCanonicalNanBf16;
};
struct F16 {
  __device__ static float widen(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
  __device__ static uint16_t round(float total) {
    return isnan(total) ? kCanonicalNanF16 : __half_as_ushort(__float2half_rn(total));
  }
  static constexpr uint16_t kNan = kCanonicalNanF16;
};

#define ANVIL_FOR_EACH_ELEMENT(i, count)                                         \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (count); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void sum_f32_kernel(Rows<float> rows, int64_t count, float* out) {
  ANVIL_FOR_EACH_ELEMENT(i, count) {
    float total = rows.at(0, i);
    for (int r = 1; r < rows.ranks; ++r) total = __fadd_rn(total, rows.at(r, i));
    out[i] = isnan(total) ? __uint_as_float(kCanonicalNanF32) : total;
  }
}

// Unsigned arithmetic wraps as the host's does, and has i32's bit pattern.
template <typename T>
__global__ void sum_wrapping_kernel(Rows<T> rows, int64_t count, T* out) {
  ANVIL_FOR_EACH_ELEMENT(i, count) {
    T total = rows.at(0, i);
    for (int r = 1; r < rows.ranks; ++r) total = static_cast<T>(total + rows.at(r, i));
    out[i] = total;
  }
}

template <typename Format>
__global__ void sum_half_kernel(Rows<uint16_t> rows, int64_t count, uint16_t* out) {
  ANVIL_FOR_EACH_ELEMENT(i, count) {
    float total = Format::widen(rows.at(0, i));
    for (int r = 1; r < rows.ranks; ++r) total = __fadd_rn(total, Format::widen(rows.at(r, i)));
    out[i] = Format::round(total);
  }
}

// The bits of max(a, b) as the host's float_max_bits: NaN canonical, +0 beats -0.
template <typename Bits>
__device__ Bits float_max_bits(float a, float b, Bits a_bits, Bits b_bits, Bits nan) {
  if (isnan(a) || isnan(b)) return nan;
  if (a > b) return a_bits;
  if (b > a) return b_bits;
  return signbit(a) ? b_bits : a_bits;
}

__global__ void max_f32_kernel(Rows<float> rows, int64_t count, float* out) {
  ANVIL_FOR_EACH_ELEMENT(i, count) {
    float best = rows.at(0, i);
    for (int r = 1; r < rows.ranks; ++r) {
      const float next = rows.at(r, i);
      best = __uint_as_float(float_max_bits<uint32_t>(next, best, __float_as_uint(next),
                                                      __float_as_uint(best), kCanonicalNanF32));
    }
    out[i] = best;
  }
}

template <typename T>
__global__ void max_integer_kernel(Rows<T> rows, int64_t count, T* out) {
  ANVIL_FOR_EACH_ELEMENT(i, count) {
    T best = rows.at(0, i);
    for (int r = 1; r < rows.ranks; ++r) {
      const T next = rows.at(r, i);
      if (next > best) best = next;
    }
    out[i] = best;
  }
}

template <typename Format>
__global__ void max_half_kernel(Rows<uint16_t> rows, int64_t count, uint16_t* out) {
  ANVIL_FOR_EACH_ELEMENT(i, count) {
    uint16_t best = rows.at(0, i);
    for (int r = 1; r < rows.ranks; ++r) {
      const uint16_t next = rows.at(r, i);
      best = float_max_bits<uint16_t>(Format::widen(next), Format::widen(best), next, best,
                                      Format::kNan);
    }
    out[i] = best;
  }
}

#undef ANVIL_FOR_EACH_ELEMENT

void check_rows(const DeviceRows& rows, int64_t count, const char* what) {
  ANVIL_CHECK(rows.ranks >= 1 && rows.own_rank >= 0 && rows.own_rank < rows.ranks && count >= 0 &&
                  (rows.ranks == 1 || rows.stride >= count),
              "[nccl] {} of {} elements over {} ranks (own row {}, received rows {} apart)", what,
              count, rows.ranks, rows.own_rank, rows.stride);
}

}  // namespace

void launch_sum_in_rank_order(const DeviceRows& rows, int64_t count, DType dtype, void* out,
                              cudaStream_t stream) {
  check_rows(rows, count, "ordered sum");
  if (count == 0) return;
  const unsigned grid = grid_for(count);
  switch (dtype) {
    case DType::f32:
      sum_f32_kernel<<<grid, kBlockSize, 0, stream>>>(Rows<float>(rows), count,
                                                      static_cast<float*>(out));
      break;
    case DType::i32:
    case DType::u32:
      sum_wrapping_kernel<<<grid, kBlockSize, 0, stream>>>(Rows<uint32_t>(rows), count,
                                                           static_cast<uint32_t*>(out));
      break;
    case DType::u16:
      sum_wrapping_kernel<<<grid, kBlockSize, 0, stream>>>(Rows<uint16_t>(rows), count,
                                                           static_cast<uint16_t*>(out));
      break;
    case DType::bf16:
      sum_half_kernel<Bf16><<<grid, kBlockSize, 0, stream>>>(Rows<uint16_t>(rows), count,
                                                             static_cast<uint16_t*>(out));
      break;
    case DType::f16:
      sum_half_kernel<F16><<<grid, kBlockSize, 0, stream>>>(Rows<uint16_t>(rows), count,
                                                            static_cast<uint16_t*>(out));
      break;
    default: ANVIL_FAIL("[nccl] ordered sum: unsupported dtype {}", dtype_name(dtype));
  }
  NCCL_CUDA_CHECK(cudaGetLastError());
}

void launch_max_of_rows(const DeviceRows& rows, int64_t count, DType dtype, void* out,
                        cudaStream_t stream) {
  check_rows(rows, count, "max");
  if (count == 0) return;
  const unsigned grid = grid_for(count);
  switch (dtype) {
    case DType::f32:
      max_f32_kernel<<<grid, kBlockSize, 0, stream>>>(Rows<float>(rows), count,
                                                      static_cast<float*>(out));
      break;
    case DType::i32:
      max_integer_kernel<<<grid, kBlockSize, 0, stream>>>(Rows<int32_t>(rows), count,
                                                          static_cast<int32_t*>(out));
      break;
    case DType::u32:
      max_integer_kernel<<<grid, kBlockSize, 0, stream>>>(Rows<uint32_t>(rows), count,
                                                          static_cast<uint32_t*>(out));
      break;
    case DType::u16:
      max_integer_kernel<<<grid, kBlockSize, 0, stream>>>(Rows<uint16_t>(rows), count,
                                                          static_cast<uint16_t*>(out));
      break;
    case DType::bf16:
      max_half_kernel<Bf16><<<grid, kBlockSize, 0, stream>>>(Rows<uint16_t>(rows), count,
                                                             static_cast<uint16_t*>(out));
      break;
    case DType::f16:
      max_half_kernel<F16><<<grid, kBlockSize, 0, stream>>>(Rows<uint16_t>(rows), count,
                                                            static_cast<uint16_t*>(out));
      break;
    default: ANVIL_FAIL("[nccl] max: unsupported dtype {}", dtype_name(dtype));
  }
  NCCL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace anvil::nccl
