// Rotary position embedding (HF rotate-half layout), forward and inverse. A thread takes one
// token, one pack of 8 frequencies i (of D/2) and up to kHeadsPerThread heads, computes the
// angles once, and rotates the pairs (x[i], x[i + D/2]) of its heads: both halves are read
// before either is written, so out may alias in. Storage types are template tags; packs move
// with 16-byte accesses when D/2 is a multiple of 8 (vector_io.cuh). inv_freq (llama3
// scaling included) is computed on the host by the CPU reference's rope_inv_freq and uploaded
// once per configuration, so angles use identical f32 frequencies; angle = f32(pos) *
// inv_freq, then cosf/sinf (full-precision, not the __sinf intrinsics).
#include "backend/cuda/vector_io.cuh"

namespace anvil::cuda {
namespace {

// Heads one thread rotates with the angles it computed: fewer sincos per element, while the
// grid still has enough threads to keep loads in flight.
constexpr int64_t kHeadsPerThread = 4;

struct RopeArgs {
  ConstArray in;
  MutableArray out;
  const int32_t* positions;
  const float* inv_freq;
  int64_t tokens, heads, half;
  float direction;
  bool vectorized;
};

template <class I, class O>
__global__ void rope_kernel(RopeArgs args) {
  const int64_t half = args.half;
  const int64_t half_packs = (half + kPackElements - 1) / kPackElements;
  const int64_t groups = (args.heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t items = args.tokens * groups * half_packs;
  for (int64_t item = global_thread(); item < items; item += grid_threads()) {
    // item = (token * groups + group) * half_packs + j: a warp's lanes cover adjacent packs.
    const int64_t j = item % half_packs, group = item / half_packs % groups;
    const int64_t token = item / (half_packs * groups);
    const int64_t first_head = group * kHeadsPerThread;
    const int64_t end_head =
        first_head + kHeadsPerThread < args.heads ? first_head + kHeadsPerThread : args.heads;
    const float position = static_cast<float>(args.positions[token]);
    float cos_a[kPackElements], sin_a[kPackElements];
#pragma unroll
    for (int lane = 0; lane < kPackElements; ++lane) {
      const int64_t i = j * kPackElements + lane;
      const float angle = i < half ? position * args.inv_freq[i] : 0.0f;
      cos_a[lane] = cosf(angle);
      sin_a[lane] = args.direction * sinf(angle);
    }
    for (int64_t h = first_head; h < end_head; ++h) {
      const int64_t row_first = (token * args.heads + h) * 2 * half;
      const Pack first = row_pack(row_first, half, j, args.vectorized);
      const Pack second = row_pack(row_first + half, half, j, args.vectorized);
      float x1[kPackElements], x2[kPackElements];
      load_pack<I>(args.in, first, x1);
      load_pack<I>(args.in, second, x2);
      float y1[kPackElements], y2[kPackElements];
#pragma unroll
      for (int lane = 0; lane < kPackElements; ++lane) {
        y1[lane] = x1[lane] * cos_a[lane] + (-x2[lane]) * sin_a[lane];
        y2[lane] = x2[lane] * cos_a[lane] + x1[lane] * sin_a[lane];
      }
      store_pack<O>(args.out, first, y1);
      store_pack<O>(args.out, second, y2);
    }
  }
}

}  // namespace

void launch_rope(ConstArray in, MutableArray out, const int32_t* positions,
                 const float* inv_freq, int64_t tokens, int64_t heads, int64_t head_dim,
                 float direction, cudaStream_t stream) {
  const int64_t half = head_dim / 2;
  if (tokens * heads * half == 0) return;
  const RopeArgs args{in, out, positions, inv_freq, tokens, heads, half, direction,
                      rows_vectorized(half, {accessed(in), accessed(out)})};
  const int64_t groups = (heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t items = tokens * groups * ((half + kPackElements - 1) / kPackElements);
  const unsigned grid = grid_for(items);
  if (in.dtype == DType::bf16 && out.dtype == DType::bf16)
    rope_kernel<Bf16, Bf16><<<grid, kBlockSize, 0, stream>>>(args);
  else if (in.dtype == DType::f32 && out.dtype == DType::f32)
    rope_kernel<F32, F32><<<grid, kBlockSize, 0, stream>>>(args);
  else
    rope_kernel<AnyFloat, AnyFloat><<<grid, kBlockSize, 0, stream>>>(args);
}

}  // namespace anvil::cuda
