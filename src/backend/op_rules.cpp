// The shared op rules of op_rules.h.
#include "backend/op_rules.h"

#include <cmath>

#include "core/error.h"

namespace anvil {

AdamWScalars adamw_scalars(const AdamWParams& params, float weight_decay) {
  const double lr = params.lr, beta1 = params.beta1, beta2 = params.beta2;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(params.step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(params.step));
  AdamWScalars s{};
  s.grad_scale = params.grad_scale;
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.beta1 = params.beta1;
  s.beta2 = params.beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = params.eps;
  return s;
}

void check_token_ids(const char* op, const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    ANVIL_CHECK(ids[i] >= 0 && ids[i] < vocab,
                "[{}] token id {} out of range [0, {}) at position {}", op, ids[i], vocab, i);
}

void check_token_ids_not_negative(const char* op, const int32_t* ids, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    ANVIL_CHECK(ids[i] >= 0, "[{}] token id {} is negative at position {}", op, ids[i], i);
}

void check_targets(const char* op, const int32_t* targets, int64_t n, int64_t vocab,
                   int ignore_index) {
  for (int64_t i = 0; i < n; ++i)
    ANVIL_CHECK(targets[i] == ignore_index || (targets[i] >= 0 && targets[i] < vocab),
                "[{}] target {} out of range [0, {}) at row {} (ignore_index is {})", op,
                targets[i], vocab, i, ignore_index);
}

void check_targets_not_negative(const char* op, const int32_t* targets, int64_t n,
                                int ignore_index) {
  for (int64_t i = 0; i < n; ++i)
    ANVIL_CHECK(targets[i] == ignore_index || targets[i] >= 0,
                "[{}] target {} is negative at row {} (ignore_index is {})", op, targets[i], i,
                ignore_index);
}

}  // namespace anvil
