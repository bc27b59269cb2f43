// OptimizedOps::dropout: the reference's per-element rule (core/counter_hash.h mask, kept
// values times the f32 1.0f / (1.0f - p)) over per-thread element ranges. The mask depends only
// on the flat index, so the thread split cannot change a single bit of the result.
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
  cpu_ref::check_tensor(x, "dropout", "x", cpu_ref::kActivationDtypes);
  cpu_ref::check_tensor(out, "dropout", "out", cpu_ref::kActivationDtypes, x.shape);
  ANVIL_CHECK(p >= 0.0f && p < 1.0f, "[dropout] p must lie in [0, 1), got {}", p);
  const float keep_scale = 1.0f / (1.0f - p);
  const uint64_t threshold = dropout_threshold(p);
  const bool x_bf16 = x.dtype == DType::bf16;
  const bool out_bf16 = out.dtype == DType::bf16;
  parallel_ranges(x.numel(), kDropoutGrain, [&](int64_t, int64_t begin, int64_t end) {
    const auto* x_f32 = static_cast<const float*>(x.data);
    const auto* x_b16 = static_cast<const uint16_t*>(x.data);
    auto* out_f32 = static_cast<float*>(out.data);
    auto* out_b16 = static_cast<uint16_t*>(out.data);
    for (int64_t i = begin; i < end; ++i) {
      const bool keep = (dropout_hash(seed, static_cast<uint64_t>(i)) >> 40) >= threshold;
      const float value = x_bf16 ? bf16_to_float(x_b16[i]) : x_f32[i];
      const float result = keep ? value * keep_scale : 0.0f;
      if (out_bf16)
        out_b16[i] = float_to_bf16(result);
      else
        out_f32[i] = result;
    }
  });
}

}  // namespace anvil::cpu_opt
