// Linear layer forward/backward as matmuls on 2-D views of the activations.
#include "model/linear.h"

namespace anvil {

namespace {

// Returns t viewed as a matrix of `cols` columns.
Tensor as_matrix(const Tensor& t, int64_t cols) { return t.view(Shape{t.numel() / cols, cols}); }

}  // namespace

void linear_forward(Backend& backend, const Tensor& x, const Tensor& weight, const Tensor& y) {
  const int64_t in = weight.shape[1], out = weight.shape[0];
  backend.matmul(as_matrix(x, in), weight, as_matrix(y, out), false, true);
}

void bias_add_forward(Backend& backend, const Tensor& ones, const Tensor& bias, const Tensor& y) {
  const int64_t out = bias.numel();
  const Tensor y2 = as_matrix(y, out);
  const Tensor ones_column = ones.flat(0, y2.shape[0]).view(Shape{y2.shape[0], 1});
  backend.matmul(ones_column, bias.view(Shape{1, out}), y2, false, false, 1.0f, 1.0f);
}

void linear_backward_input(Backend& backend, const Tensor& dy, const Tensor& weight,
                           const Tensor& dx, bool accumulate) {
  const int64_t in = weight.shape[1], out = weight.shape[0];
  backend.matmul(as_matrix(dy, out), weight, as_matrix(dx, in), false, false, 1.0f,
                 accumulate ? 1.0f : 0.0f);
}

void linear_backward_weight(Backend& backend, const Tensor& dy, const Tensor& x,
                            const Tensor& dweight) {
  const int64_t in = dweight.shape[1], out = dweight.shape[0];
  backend.matmul(as_matrix(dy, out), as_matrix(x, in), dweight, true, false, 1.0f, 1.0f);
}

void bias_backward(Backend& backend, const Tensor& ones, const Tensor& dy, const Tensor& dbias) {
  const int64_t out = dbias.numel();
  const Tensor dy2 = as_matrix(dy, out);
  const Tensor ones_column = ones.flat(0, dy2.shape[0]).view(Shape{dy2.shape[0], 1});
  backend.matmul(ones_column, dy2, dbias.view(Shape{1, out}), true, false, 1.0f, 1.0f);
}

Tensor as_compute_operand(Backend& backend, const Tensor& value, const Tensor& staging) {
  if (staging.data == value.data) return value;
  backend.cast(value, staging);
  return staging;
}

}  // namespace anvil
