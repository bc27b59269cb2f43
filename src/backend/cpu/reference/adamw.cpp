// Reference AdamW step, written to reproduce torch.optim.AdamW (single-tensor path,
// amsgrad=False) operation by operation in f32, because a golden test compares ten steps with
// PyTorch. PyTorch evaluates the scalar coefficients in Python doubles and rounds each to f32
// where it meets a tensor; we do the same from the f32 hyper-parameters:
//   g = grad * grad_scale                      (the caller's clipping/unscaling, done first)
//   p = p * f32(1 - lr * wd)                   param.mul_(1 - lr * weight_decay)
//   m = m * b1 + g * f32(1 - b1)               exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
//   v = v * b2 + f32(1 - b2) * g * g           exp_avg_sq.mul_(beta2).addcmul_(grad, grad, ...)
//   denom = sqrt(v) / f32(sqrt(1 - b2^t)) + eps
//   p = p + f32(-lr / (1 - b1^t)) * m / denom  param.addcdiv_(exp_avg, denom, value=-step_size)
// PyTorch's vectorized kernels may fuse a multiply-add, so single elements can differ by an ulp.
// The f32 scalars come from op_rules.h's adamw_scalars, shared by every backend.
#include <cmath>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/op_rules.h"
#include "backend/cpu/reference/tensor_io.h"

namespace anvil::cpu_ref {

void adamw_step(std::span<const AdamWTensors> sets, const AdamWParams& params) {
  for (const AdamWTensors& set : sets) {
    const AdamWScalars k = adamw_scalars(params, set.weight_decay);
    float* p = set.param.f32();
    const float* gr = set.grad.f32();
    float* mm = set.m.f32();
    float* vv = set.v.f32();
    for (int64_t i = 0; i < set.param.numel(); ++i) {
      const float g = gr[i] * k.grad_scale;
      p[i] = p[i] * k.decay;
      mm[i] = mm[i] * k.beta1 + g * k.one_minus_beta1;
      vv[i] = vv[i] * k.beta2 + k.one_minus_beta2 * g * g;
      const float denom = std::sqrt(vv[i]) / k.bias_correction2_sqrt + k.eps;
      p[i] = p[i] + k.neg_step_size * mm[i] / denom;
      if (set.param_copy.defined()) store_float(set.param_copy, i, p[i]);
    }
  }
}

}  // namespace anvil::cpu_ref
