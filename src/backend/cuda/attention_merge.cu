// The merge of two key blocks' attention results for the same queries (context parallelism's
// ring): one warp per (b, t, h) row, in f32 like the CPU's optimized merge: lse' =
// max + log1p(exp(-|lse - part_lse|)), out = out exp(lse - lse') + part exp(part_lse - lse').
// The warp's lanes move the row's D elements in packs of 8 (vector_io.cuh, storage type as a
// template tag); every lane reads the row's lse before lane 0 overwrites it (__syncwarp).
#include "backend/cuda/vector_io.cuh"

namespace anvil::cuda {
namespace {

struct MergeArgs {
  MutableArray out;
  float* lse;
  ConstArray part_out;
  const float* part_lse;
  int64_t B, Tq, Hq, D;
  bool vectorized;
};

template <class T>
__global__ void attention_merge_kernel(MergeArgs args) {
  const int64_t rows = args.B * args.Tq * args.Hq, D = args.D;
  const int64_t packs = (D + kPackElements - 1) / kPackElements;
  const int lane = threadIdx.x % 32;
  for (int64_t r = global_thread() / 32; r < rows; r += grid_threads() / 32) {
    // r = (b * Tq + t) * Hq + h; lse is (B, Hq, Tq).
    const int64_t b = r / (args.Tq * args.Hq), t = r / args.Hq % args.Tq, h = r % args.Hq;
    const int64_t at = (b * args.Hq + h) * args.Tq + t;
    const float mine = args.lse[at], other = args.part_lse[at];
    __syncwarp();
    if (other == -INFINITY) continue;  // uniform over the warp
    const float merged = mine == -INFINITY
                             ? other
                             : fmaxf(mine, other) + log1pf(expf(-fabsf(mine - other)));
    const float keep = mine == -INFINITY ? 0.0f : expf(mine - merged);
    const float take = expf(other - merged);
    for (int64_t j = lane; j < packs; j += 32) {
      const Pack p = row_pack(r * D, D, j, args.vectorized);
      float o[kPackElements], part[kPackElements];
      load_pack<T>(args.out, p, o);
      load_pack<T>(args.part_out, p, part);
#pragma unroll
      for (int i = 0; i < kPackElements; ++i) o[i] = keep * o[i] + take * part[i];
      store_pack<T>(args.out, p, o);
    }
    if (lane == 0) args.lse[at] = merged;
  }
}

}  // namespace

void launch_attention_merge(MutableArray out, float* lse, ConstArray part_out,
                            const float* part_lse, int64_t B, int64_t Tq, int64_t Hq, int64_t D,
                            cudaStream_t stream) {
  const int64_t rows = B * Tq * Hq;
  if (rows == 0) return;
  const MergeArgs args{out, lse, part_out, part_lse, B, Tq, Hq, D,
                       rows_vectorized(D, {accessed(out), accessed(part_out)})};
  auto kernel = attention_merge_kernel<AnyFloat>;
  switch (uniform_storage({out.dtype, part_out.dtype})) {
    case UniformStorage::f32: kernel = attention_merge_kernel<F32>; break;
    case UniformStorage::bf16: kernel = attention_merge_kernel<Bf16>; break;
    case UniformStorage::other: break;
  }
  kernel<<<grid_for(rows * 32), kBlockSize, 0, stream>>>(args);
}

}  // namespace anvil::cuda
