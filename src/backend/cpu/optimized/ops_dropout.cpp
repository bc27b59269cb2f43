// OptimizedOps::dropout: the reference's per-element rule (core/counter_hash.h mask, kept
// values times the f32 1.0f / (1.0f - p)) over per-thread element ranges, each run by the
// kernel table's vectorised hash. The mask depends only on the flat index, so neither the
// thread split nor the vector width can change a single bit of the result.
#include "backend/cpu/optimized/optimized_ops.h"
#include "backend/cpu/optimized/parallel.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/counter_hash.h"
#include "core/dtype.h"
#include "core/error.h"

namespace anvil::cpu_opt {
namespace {

// Elements per thread below which splitting costs more than it saves.
constexpr int64_t kDropoutGrain = 16384;

}  // namespace

void OptimizedOps::dropout(const Tensor& x, const Tensor& out, float p, uint64_t seed) {
  const float keep_scale = 1.0f / (1.0f - p);
  const uint64_t threshold = dropout_threshold(p);
  parallel_ranges(x.numel(), kDropoutGrain, [&](int64_t, int64_t begin, int64_t end) {
    kernels_.dropout(static_cast<const char*>(x.data) + begin * dtype_size(x.dtype), x.dtype,
                     static_cast<char*>(out.data) + begin * dtype_size(out.dtype), out.dtype,
                     end - begin, static_cast<uint64_t>(begin), seed, threshold, keep_scale);
  });
}

}  // namespace anvil::cpu_opt
