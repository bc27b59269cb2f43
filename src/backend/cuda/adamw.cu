// Fused AdamW step reproducing cpu/reference/adamw.cpp (torch.optim.AdamW's single-tensor
// order of f32 operations) bit for bit: every product and sum is an explicitly rounded
// intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn), so nvcc cannot fuse them into FMAs.
// The scalar coefficients come from the host, computed as the reference computes them.
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v,
                             MutableArray param_copy, AdamWScalars s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = __fmul_rn(grad[i], s.grad_scale);
    float p = __fmul_rn(param[i], s.decay);
    const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(g, s.one_minus_beta1));
    const float vi =
        __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.eps);
    p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (param_copy.data) store_float(param_copy, i, p);
  }
}

}  // namespace

void launch_adamw(float* param, const float* grad, float* m, float* v, MutableArray param_copy,
                  const AdamWScalars& scalars, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(param, grad, m, v, param_copy, scalars, n);
}

}  // namespace anvil::cuda
