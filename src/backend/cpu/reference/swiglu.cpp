// Reference SwiGLU gate: out = silu(gate) * up, elementwise over (N, F), in f32 with PyTorch's
// silu formula g / (1 + exp(-g)). The backward overwrites (=) dgate and dup.
#include <cmath>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"

namespace anvil::cpu_ref {
void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) {
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const float g = load_float(gate, i);
    const float silu = g / (1.0f + std::exp(-g));
    store_float(out, i, silu * load_float(up, i));
  }
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up,
                     const Tensor& dgate, const Tensor& dup) {
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const float g = load_float(gate, i);
    const float u = load_float(up, i);
    const float d = load_float(dout, i);
    const float sigmoid = 1.0f / (1.0f + std::exp(-g));
    const float silu = g * sigmoid;
    store_float(dgate, i, d * u * sigmoid * (1.0f + g * (1.0f - sigmoid)));
    store_float(dup, i, d * silu);
  }
}

}  // namespace anvil::cpu_ref
