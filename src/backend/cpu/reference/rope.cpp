// Reference rotary position embedding in the Hugging Face rotate-half layout: for i < D/2 the
// pair (x[i], x[i + D/2]) rotates by angle pos * inv_freq[i]. The angle is computed the way
// transformers + PyTorch compute it, all in f32: inv_freq = 1 / theta^((2i)/D) (with the
// "llama3" rescaling applied in f32), angle = f32(pos) * inv_freq, then f32 cos and sin. Doing
// this in double would be "more exact" but would drift from the checkpoints' training-time
// numerics by up to ~1e-3 at positions near 10^4, which the PyTorch golden test would see.
#include <cmath>
#include <numbers>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_ref {
namespace {

// Rotates every (B, T, H, D) row of `in` into `out`; direction -1 applies the inverse rotation.
void rotate(const Tensor& in, const Tensor& out, const Tensor& positions,
            const RopeParams& params, float direction) {
  const int64_t B = in.shape[0], T = in.shape[1], H = in.shape[2], D = in.shape[3];
  const int64_t half = D / 2;
  const std::vector<float> inv_freq = rope_inv_freq(D, params);
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const float pos = static_cast<float>(positions.i32()[bt]);
    std::vector<float> cos_a(half), sin_a(half);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_a[i] = std::cos(angle);
      sin_a[i] = direction * std::sin(angle);
    }
    for (int64_t h = 0; h < H; ++h) {
      const int64_t offset = (bt * H + h) * D;
      std::vector<float> row = read_floats(in, offset, D);
      std::vector<float> rotated(D);
      for (int64_t i = 0; i < half; ++i) {
        // PyTorch's x * cos + rotate_half(x) * sin, with rotate_half(x) = (-x2, x1).
        rotated[i] = row[i] * cos_a[i] + (-row[i + half]) * sin_a[i];
        rotated[i + half] = row[i + half] * cos_a[i] + row[i] * sin_a[i];
      }
      write_floats(out, offset, D, rotated.data());
    }
  }
}

}  // namespace

std::vector<float> rope_inv_freq(int64_t head_dim, const RopeParams& params) {
  ANVIL_CHECK(head_dim > 0 && head_dim % 2 == 0, "[rope] head_dim must be even, got {}",
              head_dim);
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(params.theta, exponent);
  }
  if (params.scaling_factor == 0.0f) return inv_freq;
  ANVIL_CHECK(params.high_freq_factor > params.low_freq_factor,
              "[rope] llama3 scaling needs high_freq_factor ({}) > low_freq_factor ({})",
              params.high_freq_factor, params.low_freq_factor);
  // transformers' _compute_llama3_parameters, with its Python scalars rounded to f32 as
  // PyTorch does when they meet an f32 tensor.
  const float original = static_cast<float>(params.original_max_position);
  const float low_freq_wavelen =
      static_cast<float>(static_cast<double>(params.original_max_position) /
                         params.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(static_cast<double>(params.original_max_position) /
                         params.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float factor_span = static_cast<float>(static_cast<double>(params.high_freq_factor) -
                                               params.low_freq_factor);
  for (float& inv : inv_freq) {
    const float wavelen = two_pi / inv;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies are kept
    if (wavelen > low_freq_wavelen) {           // low frequencies are slowed by the factor
      inv = inv / params.scaling_factor;
      continue;
    }
    const float smooth = (original / wavelen - params.low_freq_factor) / factor_span;
    inv = (1.0f - smooth) * inv / params.scaling_factor + smooth * inv;
  }
  return inv_freq;
}

void rope_forward(const Tensor& x, const Tensor& out, const Tensor& positions,
                  const RopeParams& params) {
  rotate(x, out, positions, params, 1.0f);
}

void rope_backward(const Tensor& dout, const Tensor& dx, const Tensor& positions,
                   const RopeParams& params) {
  rotate(dout, dx, positions, params, -1.0f);
}

}  // namespace anvil::cpu_ref
