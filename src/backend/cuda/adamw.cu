// The multi-tensor AdamW step: one launch updates up to kAdamWSetsPerLaunch tensor sets
// (kernel_plan.h's AdamWLaunch, passed by value as a __grid_constant__ parameter block, so the
// descriptors are read from the constant bank without a per-thread copy). Packs of 8 elements
// are numbered across the sets; each thread walks its packs in increasing order and advances
// its set index as it crosses set boundaries. Per element the arithmetic is
// cpu/reference/adamw.cpp's (torch.optim.AdamW's single-tensor order of f32 operations) bit
// for bit: every product and sum is an explicitly rounded intrinsic (__fmul_rn, __fadd_rn,
// __fdiv_rn, __fsqrt_rn), so nvcc cannot fuse them into FMAs. The scalar coefficients come
// from the host (op_rules.h's adamw_scalars), each set's decay from its own weight decay.
#include "backend/cuda/vector_io.cuh"

namespace anvil::cuda {
namespace {

__device__ __forceinline__ void adamw_element(const AdamWScalars& s, float decay, float& param,
                                              float grad, float& m, float& v) {
  const float g = __fmul_rn(grad, s.grad_scale);
  float p = __fmul_rn(param, decay);
  const float mi = __fadd_rn(__fmul_rn(m, s.beta1), __fmul_rn(g, s.one_minus_beta1));
  const float vi =
      __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bias_correction2_sqrt), s.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
  m = mi;
  v = vi;
  param = p;
}

__global__ void adamw_kernel(const __grid_constant__ AdamWLaunch launch) {
  int set = 0;
  for (int64_t q = global_thread(); q < launch.total_packs; q += grid_threads()) {
    set = advance_set(launch, set, q);
    const AdamWSetDescriptor& d = launch.sets[set];
    const Pack p = flat_pack(set_packs(d), q - d.first_pack);
    float param[kPackElements], grad[kPackElements], m[kPackElements], v[kPackElements];
    load_pack<F32>(d.param, DType::f32, p, param);
    load_pack<F32>(d.grad, DType::f32, p, grad);
    load_pack<F32>(d.m, DType::f32, p, m);
    load_pack<F32>(d.v, DType::f32, p, v);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i)
      adamw_element(launch.scalars, d.decay, param[i], grad[i], m[i], v[i]);
    store_pack<F32>(d.param, DType::f32, p, param);
    store_pack<F32>(d.m, DType::f32, p, m);
    store_pack<F32>(d.v, DType::f32, p, v);
    if (d.copy) store_pack<AnyFloat>(d.copy, d.copy_dtype, p, param);
  }
}

}  // namespace

void launch_adamw(const AdamWLaunch& launch, cudaStream_t stream) {
  if (launch.total_packs == 0) return;
  adamw_kernel<<<grid_for(launch.total_packs), kBlockSize, 0, stream>>>(launch);
}

}  // namespace anvil::cuda
