// Reference elementwise ops: add, scale, axpy and cast over any float storage dtype. Each
// element is loaded to f32, combined in f32 and rounded once on store; the loops touch element
// i only after reading element i, so outputs may alias inputs.
#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"

namespace anvil::cpu_ref {

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (int64_t i = 0; i < a.numel(); ++i)
    store_float(out, i, load_float(a, i) + load_float(b, i));
}

void scale(const Tensor& x, float alpha) {
  for (int64_t i = 0; i < x.numel(); ++i) store_float(x, i, load_float(x, i) * alpha);
}

void axpy(float alpha, const Tensor& x, const Tensor& y) {
  for (int64_t i = 0; i < x.numel(); ++i)
    store_float(y, i, load_float(y, i) + alpha * load_float(x, i));
}

void cast(const Tensor& src, const Tensor& dst) {
  for (int64_t i = 0; i < src.numel(); ++i) store_float(dst, i, load_float(src, i));
}

}  // namespace anvil::cpu_ref
