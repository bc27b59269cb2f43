// Backend::accumulate_exact_squares on the GPU. Each thread adds its elements' squares, as
// core/exact_square_sum.h's digit increments (the host's own constexpr formula), into its
// column of 64-bit counters in shared memory; the block then sums each digit over its threads
// and adds it to the device counters with one atomicAdd. Integer adds commute and no partial
// sum can exceed the total, which the capacity rule keeps below 2^64, so the counters are the
// same bits whatever the schedule; the host carries between digits when it folds them.
#include "backend/cuda/device_common.cuh"
#include "core/exact_square_sum.h"

namespace anvil::cuda {
namespace {

using Counter = unsigned long long;  // what atomicAdd takes; the same 64 bits as uint64_t
static_assert(sizeof(Counter) == sizeof(uint64_t));

// Shared memory: kExactDigitCount x kBlockSize counters, 40 KiB, below the 48 KiB static limit.
// Column-major by thread, so a warp's counters lie in distinct banks whatever digits it hits.
__global__ void __launch_bounds__(kBlockSize)
    exact_squares_kernel(const float* x, int64_t n, Counter* counters) {
  __shared__ Counter digits[kExactDigitCount][kBlockSize];
  const int thread = static_cast<int>(threadIdx.x);
  for (int d = 0; d < kExactDigitCount; ++d) digits[d][thread] = 0;
  uint64_t flags = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + thread; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const ExactSquareDigits square = exact_square_digits(__float_as_uint(x[i]));
    digits[square.digit][thread] += square.low;
    digits[square.digit + 1][thread] += square.middle;
    digits[square.digit + 2][thread] += square.high;
    flags |= square.flags;
  }
  const bool any_infinity = __syncthreads_or(static_cast<int>(flags & kExactInfinityFlag));
  const bool any_nan = __syncthreads_or(static_cast<int>(flags & kExactNanFlag));
  for (int stride = kBlockSize / 2; stride > 0; stride /= 2) {
    if (thread < stride)
      for (int d = 0; d < kExactDigitCount; ++d) digits[d][thread] += digits[d][thread + stride];
    __syncthreads();
  }
  if (thread < kExactDigitCount && digits[thread][0] != 0)
    atomicAdd(&counters[thread], digits[thread][0]);
  if (thread == 0 && (any_infinity || any_nan)) {
    atomicOr(&counters[kExactFlagsCounter],
             (any_infinity ? kExactInfinityFlag : 0) | (any_nan ? kExactNanFlag : 0));
  }
}

}  // namespace

void launch_accumulate_exact_squares(const float* x, int64_t n, uint64_t* counters,
                                     cudaStream_t stream) {
  exact_squares_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(
      x, n, reinterpret_cast<Counter*>(counters));
}

}  // namespace anvil::cuda
