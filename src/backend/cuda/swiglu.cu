// SwiGLU forward and backward, elementwise over (N, F) in f32 with the reference's formulas:
// silu(g) = g / (1 + exp(-g)); dgate = dout * up * s * (1 + g * (1 - s)), dup = dout * silu(g)
// with s = sigmoid(g). expf (not __expf) keeps the result within an ulp or two of the host.
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

__global__ void swiglu_forward_kernel(ConstArray gate, ConstArray up, MutableArray out,
                                      int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = load_float(gate, i);
    const float silu = g / (1.0f + expf(-g));
    store_float(out, i, silu * load_float(up, i));
  }
}

__global__ void swiglu_backward_kernel(ConstArray dout, ConstArray gate, ConstArray up,
                                       MutableArray dgate, MutableArray dup, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = load_float(gate, i);
    const float u = load_float(up, i);
    const float d = load_float(dout, i);
    const float sigmoid = 1.0f / (1.0f + expf(-g));
    const float silu = g * sigmoid;
    store_float(dgate, i, d * u * sigmoid * (1.0f + g * (1.0f - sigmoid)));
    store_float(dup, i, d * silu);
  }
}

}  // namespace

void launch_swiglu_forward(ConstArray gate, ConstArray up, MutableArray out, int64_t n,
                           cudaStream_t stream) {
  swiglu_forward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(gate, up, out, n);
}

void launch_swiglu_backward(ConstArray dout, ConstArray gate, ConstArray up, MutableArray dgate,
                            MutableArray dup, int64_t n, cudaStream_t stream) {
  swiglu_backward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(dout, gate, up, dgate, dup, n);
}

}  // namespace anvil::cuda
