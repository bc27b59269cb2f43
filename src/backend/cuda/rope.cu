// Rotary position embedding (HF rotate-half layout), forward and inverse. One thread per pair
// (token, head, i < D/2) reads x[i] and x[i + D/2] before writing both, so out may alias in.
// inv_freq (llama3 scaling included) is computed on the host by the CPU reference's
// rope_inv_freq and uploaded once per configuration, so angles use identical f32 frequencies;
// angle = f32(pos) * inv_freq, then cosf/sinf (full-precision, not the __sinf intrinsics).
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

__global__ void rope_kernel(ConstArray in, MutableArray out, const int32_t* positions,
                            const float* inv_freq, int64_t heads, int64_t half, int64_t pairs,
                            float direction) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = p % half;
    const int64_t row = p / half;  // (token, head)
    const int64_t token = row / heads;
    const float angle = static_cast<float>(positions[token]) * inv_freq[i];
    const float cos_a = cosf(angle);
    const float sin_a = direction * sinf(angle);
    const int64_t first = row * 2 * half + i;
    const float x1 = load_float(in, first);
    const float x2 = load_float(in, first + half);
    store_float(out, first, x1 * cos_a + (-x2) * sin_a);
    store_float(out, first + half, x2 * cos_a + x1 * sin_a);
  }
}

}  // namespace

void launch_rope(ConstArray in, MutableArray out, const int32_t* positions,
                 const float* inv_freq, int64_t tokens, int64_t heads, int64_t head_dim,
                 float direction, cudaStream_t stream) {
  const int64_t half = head_dim / 2;
  const int64_t pairs = tokens * heads * half;
  if (pairs == 0) return;
  rope_kernel<<<grid_for(pairs), kBlockSize, 0, stream>>>(in, out, positions, inv_freq, heads,
                                                          half, pairs, direction);
}

}  // namespace anvil::cuda
