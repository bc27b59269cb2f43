// add, scale, axpy and cast: grid-stride loops over any float storage dtypes. Each element is
// widened to f32, combined and rounded once on store, and read before it is written, so every
// output may alias an input. The f32 products and sums use __fmul_rn/__fadd_rn so nvcc does
// not fuse them into FMAs: results then match the CPU reference bit for bit.
#include "backend/cuda/device_common.cuh"

namespace anvil::cuda {
namespace {

__global__ void add_kernel(ConstArray a, ConstArray b, MutableArray out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store_float(out, i, __fadd_rn(load_float(a, i), load_float(b, i)));
}

__global__ void scale_kernel(MutableArray x, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store_float(x, i, __fmul_rn(load_float(x.data, x.dtype, i), alpha));
}

__global__ void axpy_kernel(float alpha, ConstArray x, MutableArray y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store_float(y, i,
                __fadd_rn(load_float(y.data, y.dtype, i), __fmul_rn(alpha, load_float(x, i))));
}

__global__ void cast_kernel(ConstArray src, MutableArray dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    store_float(dst, i, load_float(src, i));
}

}  // namespace

void launch_add(ConstArray a, ConstArray b, MutableArray out, int64_t n, cudaStream_t stream) {
  add_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(a, b, out, n);
}

void launch_scale(MutableArray x, float alpha, int64_t n, cudaStream_t stream) {
  scale_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, alpha, n);
}

void launch_axpy(float alpha, ConstArray x, MutableArray y, int64_t n, cudaStream_t stream) {
  axpy_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(alpha, x, y, n);
}

void launch_cast(ConstArray src, MutableArray dst, int64_t n, cudaStream_t stream) {
  cast_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(src, dst, n);
}

}  // namespace anvil::cuda
