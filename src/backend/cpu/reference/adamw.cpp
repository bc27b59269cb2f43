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
#include <cmath>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_ref {

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWParams& params, const Tensor* param_copy) {
  const double lr = params.lr, beta1 = params.beta1, beta2 = params.beta2;
  const float decay = static_cast<float>(1.0 - lr * params.weight_decay);
  const float b1 = params.beta1, b2 = params.beta2;
  const float one_minus_b1 = static_cast<float>(1.0 - beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(params.step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(params.step));
  const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));

  float* p = param.f32();
  const float* gr = grad.f32();
  float* mm = m.f32();
  float* vv = v.f32();
  for (int64_t i = 0; i < param.numel(); ++i) {
    const float g = gr[i] * params.grad_scale;
    p[i] = p[i] * decay;
    mm[i] = mm[i] * b1 + g * one_minus_b1;
    vv[i] = vv[i] * b2 + one_minus_b2 * g * g;
    const float denom = std::sqrt(vv[i]) / bias_correction2_sqrt + params.eps;
    p[i] = p[i] + neg_step_size * mm[i] / denom;
    if (param_copy) store_float(*param_copy, i, p[i]);
  }
}

}  // namespace anvil::cpu_ref
