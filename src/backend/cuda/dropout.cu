// Dropout with core/counter_hash.h's counter-based mask: element i survives when
// (dropout_hash(seed, i) >> 40) >= dropout_threshold(p) and is then multiplied by
// 1 / (1 - p) computed in f32 exactly as the CPU does, so CPU and GPU masks and values agree
// bit for bit. The hash is the host's constexpr function (nvcc --expt-relaxed-constexpr).
#include "backend/cuda/device_common.cuh"
#include "core/counter_hash.h"

namespace anvil::cuda {
namespace {

__global__ void dropout_kernel(ConstArray x, MutableArray out, uint64_t threshold,
                               float keep_scale, uint64_t seed, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const bool keep = (dropout_hash(seed, static_cast<uint64_t>(i)) >> 40) >= threshold;
    store_float(out, i, keep ? __fmul_rn(load_float(x, i), keep_scale) : 0.0f);
  }
}

}  // namespace

void launch_dropout(ConstArray x, MutableArray out, float p, uint64_t seed, int64_t n,
                    cudaStream_t stream) {
  const float keep_scale = 1.0f / (1.0f - p);
  dropout_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, out, dropout_threshold(p),
                                                          keep_scale, seed, n);
}

}  // namespace anvil::cuda
