// SwiGLU forward and backward, elementwise over (N, F) in f32 with the reference's formulas:
// silu(g) = g / (1 + exp(-g)); dgate = dout * up * s * (1 + g * (1 - s)), dup = dout * silu(g)
// with s = sigmoid(g). expf (not __expf) keeps the result within an ulp or two of the host.
// Grid-stride over packs of 8 (vector_io.cuh); one instantiation per uniform storage dtype,
// AnyFloat for mixed ones.
#include "backend/cuda/vector_io.cuh"

namespace anvil::cuda {
namespace {

template <class T>
__global__ void swiglu_forward_kernel(ConstArray gate, ConstArray up, MutableArray out,
                                      FlatPacks packs) {
  for (int64_t q = global_thread(); q < packs.count; q += grid_threads()) {
    const Pack p = flat_pack(packs, q);
    float g[kPackElements], u[kPackElements];
    load_pack<T>(gate, p, g);
    load_pack<T>(up, p, u);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) {
      const float silu = g[i] / (1.0f + expf(-g[i]));
      g[i] = silu * u[i];
    }
    store_pack<T>(out, p, g);
  }
}

template <class T>
__global__ void swiglu_backward_kernel(ConstArray dout, ConstArray gate, ConstArray up,
                                       MutableArray dgate, MutableArray dup, FlatPacks packs) {
  for (int64_t q = global_thread(); q < packs.count; q += grid_threads()) {
    const Pack p = flat_pack(packs, q);
    float d[kPackElements], g[kPackElements], u[kPackElements];
    load_pack<T>(dout, p, d);
    load_pack<T>(gate, p, g);
    load_pack<T>(up, p, u);
    float dg[kPackElements], du[kPackElements];
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) {
      const float sigmoid = 1.0f / (1.0f + expf(-g[i]));
      const float silu = g[i] * sigmoid;
      dg[i] = d[i] * u[i] * sigmoid * (1.0f + g[i] * (1.0f - sigmoid));
      du[i] = d[i] * silu;
    }
    store_pack<T>(dgate, p, dg);
    store_pack<T>(dup, p, du);
  }
}

}  // namespace

void launch_swiglu_forward(ConstArray gate, ConstArray up, MutableArray out, int64_t n,
                           cudaStream_t stream) {
  if (n == 0) return;
  const FlatPacks packs = plan_flat_packs(n, {accessed(gate), accessed(up), accessed(out)});
  auto kernel = swiglu_forward_kernel<AnyFloat>;
  switch (uniform_storage({gate.dtype, up.dtype, out.dtype})) {
    case UniformStorage::f32: kernel = swiglu_forward_kernel<F32>; break;
    case UniformStorage::bf16: kernel = swiglu_forward_kernel<Bf16>; break;
    case UniformStorage::other: break;
  }
  kernel<<<grid_for(packs.count), kBlockSize, 0, stream>>>(gate, up, out, packs);
}

void launch_swiglu_backward(ConstArray dout, ConstArray gate, ConstArray up, MutableArray dgate,
                            MutableArray dup, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const FlatPacks packs = plan_flat_packs(
      n, {accessed(dout), accessed(gate), accessed(up), accessed(dgate), accessed(dup)});
  auto kernel = swiglu_backward_kernel<AnyFloat>;
  switch (uniform_storage({dout.dtype, gate.dtype, up.dtype, dgate.dtype, dup.dtype})) {
    case UniformStorage::f32: kernel = swiglu_backward_kernel<F32>; break;
    case UniformStorage::bf16: kernel = swiglu_backward_kernel<Bf16>; break;
    case UniformStorage::other: break;
  }
  kernel<<<grid_for(packs.count), kBlockSize, 0, stream>>>(dout, gate, up, dgate, dup, packs);
}

}  // namespace anvil::cuda
