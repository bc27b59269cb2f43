// Reference dropout: element i of x survives when dropout_keep(seed, i, p) (core/counter_hash.h)
// and is then multiplied by the f32 value 1.0f / (1.0f - p); dropped elements become exactly 0.
// The mask is a pure function of (seed, i), so applying the op to a cotangent with the same
// seed is its backward. Element i is written only after it is read, so out may alias x.
#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/counter_hash.h"
#include "core/error.h"

namespace anvil::cpu_ref {

void dropout(const Tensor& x, const Tensor& out, float p, uint64_t seed) {
  const float keep_scale = 1.0f / (1.0f - p);
  const uint64_t threshold = dropout_threshold(p);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = (dropout_hash(seed, static_cast<uint64_t>(i)) >> 40) >= threshold;
    store_float(out, i, keep ? load_float(x, i) * keep_scale : 0.0f);
  }
}

}  // namespace anvil::cpu_ref
