// Reference RMSNorm (no mean subtraction, no bias), forward and backward. Statistics are f32
// values with double sums; the forward multiplies in Hugging Face's order, weight * (x * rstd),
// so f32 results match LlamaRMSNorm. The backward accumulates (+=) into dx and dweight. The
// fused forms (residual add before the norm, dx's compute-dtype copy after it) are defined as
// the separate ops in sequence, so the fused kernels of other backends equal them bit for bit.
#include <cmath>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_ref {

void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& rstd,
                     float eps) {
  const int64_t N = x.shape[0], C = x.shape[1];
  const std::vector<float> w = read_floats(weight);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> row = read_floats(x, n * C, C);
    double sum_sq = 0.0;
    for (float value : row) sum_sq += static_cast<double>(value) * value;
    const float mean_sq = static_cast<float>(sum_sq / static_cast<double>(C));
    const float r = 1.0f / std::sqrt(mean_sq + eps);
    for (int64_t c = 0; c < C; ++c) row[c] = w[c] * (row[c] * r);
    write_floats(out, n * C, C, row.data());
    rstd.f32()[n] = r;
  }
}

void add_rmsnorm_forward(const Tensor& a, const Tensor& b, const Tensor& sum,
                         const Tensor& weight, const Tensor& out, const Tensor& rstd,
                         float eps) {
  add(a, b, sum);
  rmsnorm_forward(sum, weight, out, rstd, eps);
}

void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                      const Tensor* dx_copy) {
  const int64_t N = x.shape[0], C = x.shape[1];
  const std::vector<float> w = read_floats(weight);
  std::vector<double> dweight_sum(static_cast<size_t>(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<float> xr = read_floats(x, n * C, C);
    const std::vector<float> g = read_floats(dout, n * C, C);
    std::vector<float> dxr = read_floats(dx, n * C, C);
    const float r = rstd.f32()[n];
    // d(x * r)/dx = r * (I - x x^T r^2 / C): project the upstream g * w off x.
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(g[c] * w[c]) * xr[c];
    const float coeff = static_cast<float>(dot / static_cast<double>(C) * r * r * r);
    for (int64_t c = 0; c < C; ++c) {
      dxr[c] += r * (g[c] * w[c]) - xr[c] * coeff;
      dweight_sum[c] += static_cast<double>(g[c]) * (xr[c] * r);
    }
    write_floats(dx, n * C, C, dxr.data());
    // The copy rounds what dx holds now (dx may itself be a rounded dtype).
    if (dx_copy) write_floats(*dx_copy, n * C, C, read_floats(dx, n * C, C).data());
  }
  for (int64_t c = 0; c < C; ++c)
    dweight.f32()[c] += static_cast<float>(dweight_sum[c]);
}

}  // namespace anvil::cpu_ref
