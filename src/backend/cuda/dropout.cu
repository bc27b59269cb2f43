// Dropout with core/counter_hash.h's counter-based mask: element i survives when
// (dropout_hash(seed, i) >> 40) >= dropout_threshold(p) and is then multiplied by
// 1 / (1 - p) computed in f32 exactly as the CPU does, so CPU and GPU masks and values agree
// bit for bit. The hash is the host's constexpr function (nvcc --expt-relaxed-constexpr).
// Grid-stride over packs of 8 (vector_io.cuh); out may alias x (each pack is read first).
#include "backend/cuda/vector_io.cuh"
#include "core/counter_hash.h"

namespace anvil::cuda {
namespace {

template <class T>
__global__ void dropout_kernel(ConstArray x, MutableArray out, uint64_t threshold,
                               float keep_scale, uint64_t seed, FlatPacks packs) {
  for (int64_t q = global_thread(); q < packs.count; q += grid_threads()) {
    const Pack p = flat_pack(packs, q);
    float v[kPackElements];
    load_pack<T>(x, p, v);
#pragma unroll
    for (int i = 0; i < kPackElements; ++i) {
      const uint64_t index = static_cast<uint64_t>(p.first + i);  // unused lanes: never stored
      const bool keep = (dropout_hash(seed, index) >> 40) >= threshold;
      v[i] = keep ? __fmul_rn(v[i], keep_scale) : 0.0f;
    }
    store_pack<T>(out, p, v);
  }
}

}  // namespace

void launch_dropout(ConstArray x, MutableArray out, float p, uint64_t seed, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  const float keep_scale = 1.0f / (1.0f - p);
  const FlatPacks packs = plan_flat_packs(n, {accessed(x), accessed(out)});
  auto kernel = dropout_kernel<AnyFloat>;
  switch (uniform_storage({x.dtype, out.dtype})) {
    case UniformStorage::f32: kernel = dropout_kernel<F32>; break;
    case UniformStorage::bf16: kernel = dropout_kernel<Bf16>; break;
    case UniformStorage::other: break;
  }
  kernel<<<grid_for(packs.count), kBlockSize, 0, stream>>>(x, out, dropout_threshold(p),
                                                           keep_scale, seed, packs);
}

}  // namespace anvil::cuda
