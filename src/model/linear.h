// Linear layers built from the backend's matmul: y = x W^T (+ b) with W stored (out, in) as in
// Hugging Face checkpoints, and the matching input and parameter gradients. The bias uses the
// matmul too (a rank-1 product with a ones column), so bias add and its gradient (a column
// sum) run on any backend without a dedicated op.
#pragma once

#include "backend/backend.h"

namespace anvil {

// y (N, out) = x (N, in) @ W^T with W (out, in).
void linear_forward(Backend& backend, const Tensor& x, const Tensor& weight, const Tensor& y);
// y (N, out) += ones (N, 1) @ bias (1, out): adds bias to every row.
void bias_add_forward(Backend& backend, const Tensor& ones, const Tensor& bias, const Tensor& y);
// dx (N, in) = dy (N, out) @ W when accumulate is false, += when true.
void linear_backward_input(Backend& backend, const Tensor& dy, const Tensor& weight,
                           const Tensor& dx, bool accumulate);
// dW (out, in) += dy^T (out, N) @ x (N, in).
void linear_backward_weight(Backend& backend, const Tensor& dy, const Tensor& x,
                            const Tensor& dweight);
// dbias (out) += column sums of dy (N, out), computed as ones^T (1, N) @ dy.
void bias_backward(Backend& backend, const Tensor& ones, const Tensor& dy, const Tensor& dbias);
// Returns `value` as a GEMM operand in `staging`'s dtype: `value` itself when staging is the
// same view (an f32 model), otherwise staging after casting value into it.
Tensor as_compute_operand(Backend& backend, const Tensor& value, const Tensor& staging);

}  // namespace anvil
