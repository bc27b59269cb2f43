// add, scale, axpy and cast: grid-stride loops over packs of 8 elements (vector_io.cuh), the
// storage types as template tags: one instantiation per uniform dtype, the casts between every
// pair, and AnyFloat for other mixes. Each element is widened to f32, combined and rounded
// once on store, and every pack is read before it is written by the same thread, so an output
// may alias an input. Products and sums use __fmul_rn/__fadd_rn so nvcc does not fuse them
// into FMAs: results match the CPU reference bit for bit.
#include "backend/cuda/vector_io.cuh"

namespace anvil::cuda {
namespace {

template <class A, class B, class O>
__global__ void add_kernel(ConstArray a, ConstArray b, MutableArray out, FlatPacks packs) {
  for (int64_t q = global_thread(); q < packs.count; q += grid_threads()) {
    const Pack p = flat_pack(packs, q);
    float x[kPackElements], y[kPackElements];
    load_pack<A>(a, p, x);
    load_pack<B>(b, p, y);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) x[i] = __fadd_rn(x[i], y[i]);
    store_pack<O>(out, p, x);
  }
}

template <class T>
__global__ void scale_kernel(MutableArray x, float alpha, FlatPacks packs) {
  for (int64_t q = global_thread(); q < packs.count; q += grid_threads()) {
    const Pack p = flat_pack(packs, q);
    float v[kPackElements];
    load_pack<T>(x, p, v);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) v[i] = __fmul_rn(v[i], alpha);
    store_pack<T>(x, p, v);
  }
}

template <class X, class Y>
__global__ void axpy_kernel(float alpha, ConstArray x, MutableArray y, FlatPacks packs) {
  for (int64_t q = global_thread(); q < packs.count; q += grid_threads()) {
    const Pack p = flat_pack(packs, q);
    float xv[kPackElements], yv[kPackElements];
    load_pack<X>(x, p, xv);
    load_pack<Y>(y, p, yv);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) yv[i] = __fadd_rn(yv[i], __fmul_rn(alpha, xv[i]));
    store_pack<Y>(y, p, yv);
  }
}

template <class S, class D>
__global__ void cast_kernel(ConstArray src, MutableArray dst, FlatPacks packs) {
  for (int64_t q = global_thread(); q < packs.count; q += grid_threads()) {
    const Pack p = flat_pack(packs, q);
    float v[kPackElements];
    load_pack<S>(src, p, v);
    store_pack<D>(dst, p, v);
  }
}

template <class S, class D>
void cast_typed(ConstArray src, MutableArray dst, const FlatPacks& packs, cudaStream_t stream) {
  cast_kernel<S, D><<<grid_for(packs.count), kBlockSize, 0, stream>>>(src, dst, packs);
}

template <class S>
void cast_from(ConstArray src, MutableArray dst, const FlatPacks& packs, cudaStream_t stream) {
  switch (dst.dtype) {
    case DType::bf16: return cast_typed<S, Bf16>(src, dst, packs, stream);
    case DType::f16: return cast_typed<S, F16>(src, dst, packs, stream);
    default: return cast_typed<S, F32>(src, dst, packs, stream);
  }
}

}  // namespace

void launch_add(ConstArray a, ConstArray b, MutableArray out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const FlatPacks packs = plan_flat_packs(n, {accessed(a), accessed(b), accessed(out)});
  const unsigned grid = grid_for(packs.count);
  const bool uniform = a.dtype == b.dtype && b.dtype == out.dtype;
  if (!uniform) {
    add_kernel<AnyFloat, AnyFloat, AnyFloat><<<grid, kBlockSize, 0, stream>>>(a, b, out, packs);
    return;
  }
  switch (out.dtype) {
    case DType::bf16:
      add_kernel<Bf16, Bf16, Bf16><<<grid, kBlockSize, 0, stream>>>(a, b, out, packs);
      break;
    case DType::f16:
      add_kernel<F16, F16, F16><<<grid, kBlockSize, 0, stream>>>(a, b, out, packs);
      break;
    default: add_kernel<F32, F32, F32><<<grid, kBlockSize, 0, stream>>>(a, b, out, packs); break;
  }
}

void launch_scale(MutableArray x, float alpha, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const FlatPacks packs = plan_flat_packs(n, {accessed(x)});
  const unsigned grid = grid_for(packs.count);
  switch (x.dtype) {
    case DType::bf16: scale_kernel<Bf16><<<grid, kBlockSize, 0, stream>>>(x, alpha, packs); break;
    case DType::f16: scale_kernel<F16><<<grid, kBlockSize, 0, stream>>>(x, alpha, packs); break;
    default: scale_kernel<F32><<<grid, kBlockSize, 0, stream>>>(x, alpha, packs); break;
  }
}

void launch_axpy(float alpha, ConstArray x, MutableArray y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const FlatPacks packs = plan_flat_packs(n, {accessed(x), accessed(y)});
  const unsigned grid = grid_for(packs.count);
  if (x.dtype == DType::f32 && y.dtype == DType::f32)
    axpy_kernel<F32, F32><<<grid, kBlockSize, 0, stream>>>(alpha, x, y, packs);
  else if (x.dtype == DType::bf16 && y.dtype == DType::f32)
    axpy_kernel<Bf16, F32><<<grid, kBlockSize, 0, stream>>>(alpha, x, y, packs);
  else if (x.dtype == DType::bf16 && y.dtype == DType::bf16)
    axpy_kernel<Bf16, Bf16><<<grid, kBlockSize, 0, stream>>>(alpha, x, y, packs);
  else
    axpy_kernel<AnyFloat, AnyFloat><<<grid, kBlockSize, 0, stream>>>(alpha, x, y, packs);
}

void launch_cast(ConstArray src, MutableArray dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const FlatPacks packs = plan_flat_packs(n, {accessed(src), accessed(dst)});
  switch (src.dtype) {
    case DType::bf16: return cast_from<Bf16>(src, dst, packs, stream);
    case DType::f16: return cast_from<F16>(src, dst, packs, stream);
    default: return cast_from<F32>(src, dst, packs, stream);
  }
}

}  // namespace anvil::cuda
