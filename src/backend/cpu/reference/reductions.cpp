// Reference reductions: the sum of squares behind the global gradient norm (double, element
// order), the loss sum a step reads back once (double, element order) and the all-finite
// check behind loss-scale overflow detection.
#include <cmath>
#include <cstring>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"

namespace anvil::cpu_ref {

double sum_squares(const Tensor& x) {
  double sum = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double value = load_float(x, i);
    sum += value * value;
  }
  return sum;
}

void sum_to_double(const Tensor& x, const Tensor& result) {
  const float* values = x.f32();
  double sum = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) sum += values[i];
  std::memcpy(result.data, &sum, sizeof(sum));
}

bool all_finite(const Tensor& x) {
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(load_float(x, i))) return false;
  return true;
}

}  // namespace anvil::cpu_ref
