// The merge of two key blocks' attention results for the same queries (context parallelism's
// ring): one thread per (b, t, h) row, in f32 like the CPU's optimized merge: lse' =
// max + log1p(exp(-|lse - part_lse|)), out = out exp(lse - lse') + part exp(part_lse - lse').
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

__global__ void attention_merge_kernel(MutableArray out, float* lse, ConstArray part_out,
                                       const float* part_lse, int64_t B, int64_t Tq, int64_t Hq,
                                       int64_t D) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < B * Tq * Hq;
       r += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = r / (Tq * Hq), t = r / Hq % Tq, h = r % Hq;  // r = (b * Tq + t) * Hq + h
    const int64_t at = (b * Hq + h) * Tq + t;
    const float mine = lse[at], other = part_lse[at];
    if (other == -INFINITY) continue;
    const float merged = mine == -INFINITY
                             ? other
                             : fmaxf(mine, other) + log1pf(expf(-fabsf(mine - other)));
    const float keep = mine == -INFINITY ? 0.0f : expf(mine - merged);
    const float take = expf(other - merged);
    for (int64_t i = r * D; i < (r + 1) * D; ++i)
      store_float(out, i, keep * load_float(out.data, out.dtype, i) + take * load_float(part_out, i));
    lse[at] = merged;
  }
}

}  // namespace

void launch_attention_merge(MutableArray out, float* lse, ConstArray part_out,
                            const float* part_lse, int64_t B, int64_t Tq, int64_t Hq, int64_t D,
                            cudaStream_t stream) {
  const int64_t rows = B * Tq * Hq;
  attention_merge_kernel<<<grid_for(rows), kBlockSize, 0, stream>>>(out, lse, part_out,
                                                                      part_lse, B, Tq, Hq, D);
}

}  // namespace anvil::cuda
