// AdamW against a double-precision scalar transcription of torch.optim.AdamW (decoupled decay
// param *= 1 - lr * wd, bias-corrected moments), per-span weight decay, clipping as
// torch.nn.utils.clip_grad_norm_, and the step counter.
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace anvil {
namespace {

struct ScalarAdamW {
  double lr, beta1, beta2, eps, weight_decay;
  std::vector<double> m, v;
  int64_t step = 0;

  void update(std::vector<double>& param, const std::vector<double>& grad,
              const std::vector<bool>& decay, double grad_scale) {
    ++step;
    m.resize(param.size(), 0.0);
    v.resize(param.size(), 0.0);
    const double bias1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bias2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    for (size_t i = 0; i < param.size(); ++i) {
      const double g = grad[i] * grad_scale;
      if (decay[i]) param[i] *= 1.0 - lr * weight_decay;
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bias2) + eps;
      param[i] -= (lr / bias1) * m[i] / denom;
    }
  }
};

// Deterministic pseudo-random values in [-1, 1).
double value_at(int64_t i, int64_t salt) {
  const uint64_t h = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^
                     (static_cast<uint64_t>(salt) * 0xBF58476D1CE4E5B9ull);
  return static_cast<double>((h >> 11) % 2000001) / 1000000.0 - 1.0;
}

class AdamWTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::unique_ptr<Backend> backend = make_backend(GetParam());
};

TEST_P(AdamWTest, MatchesTorchFormulaInDoublePrecision) {
  // Two groups; group 0 has a decaying span, a non-decaying span, then a decaying one.
  const std::vector<int64_t> sizes = {37, 20};
  std::vector<Buffer> param_buffers, grad_buffers;
  std::vector<OptimizerGroup> groups;
  for (int64_t n : sizes) {
    param_buffers.emplace_back(*backend, n * sizeof(float), MemoryCategory::trainable_weights);
    grad_buffers.emplace_back(*backend, n * sizeof(float), MemoryCategory::gradients);
    OptimizerGroup group;
    group.params = param_buffers.back().as(DType::f32, {n});
    group.grads = grad_buffers.back().as(DType::f32, {n});
    groups.push_back(group);
  }
  groups[0].spans = {{0, 16, true}, {16, 5, false}, {21, 16, true}};
  groups[1].spans = {{0, 20, false}};

  AdamWHyperParams hyper{0.9, 0.95, 1e-8, 0.1};
  ScalarAdamW reference{0, 0.9, 0.95, 1e-8, 0.1, {}, {}};
  std::vector<double> ref_params;
  std::vector<bool> decay_flags;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t i = 0; i < sizes[g]; ++i) {
      const float p = static_cast<float>(value_at(i, 100 + g));
      groups[g].params.f32()[i] = p;
      ref_params.push_back(p);
      bool d = false;
      for (const ParamSpan& s : groups[g].spans)
        if (i >= s.offset && i < s.offset + s.count) d = s.weight_decay;
      decay_flags.push_back(d);
    }
  }
  AdamW optimizer(*backend, groups, hyper);
  for (int step = 1; step <= 10; ++step) {
    std::vector<double> grads;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int64_t i = 0; i < sizes[g]; ++i) {
        const float gr = static_cast<float>(value_at(i, step * 10 + g) * 0.5);
        groups[g].grads.f32()[i] = gr;
        grads.push_back(gr);
      }
    }
    const double lr = 1e-2 * step / 10.0;
    const double scale = step % 3 == 0 ? 0.25 : 1.0;
    reference.lr = static_cast<float>(lr);
    optimizer.step(lr, scale);
    reference.update(ref_params, grads, decay_flags, static_cast<float>(scale));
  }
  EXPECT_EQ(optimizer.step_count(), 10);
  size_t k = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t i = 0; i < sizes[g]; ++i, ++k) {
      EXPECT_NEAR(groups[g].params.f32()[i], ref_params[k], 2e-6 * (1 + std::abs(ref_params[k])))
          << "group " << g << " element " << i;
    }
  }
  // The moments are exposed for checkpoints, m then v per group, with the group's layout.
  const auto state = optimizer.state_tensors();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].name, "adamw.m.0");
  EXPECT_EQ(state[3].name, "adamw.v.1");
  EXPECT_EQ(state[2].tensor.numel(), 20);
  EXPECT_NEAR(state[2].tensor.f32()[0], reference.m[37], 1e-6);
}

TEST_P(AdamWTest, ZeroDecaySpanLeavesParameterWithZeroGradientUnchanged) {
  Buffer params(*backend, 4 * sizeof(float), MemoryCategory::trainable_weights);
  Buffer grads(*backend, 4 * sizeof(float), MemoryCategory::gradients);
  OptimizerGroup group{
      params.as(DType::f32, {4}), grads.as(DType::f32, {4}), {{0, 2, true}, {2, 2, false}}, {}};
  for (int i = 0; i < 4; ++i) {
    group.params.f32()[i] = 1.0f;
    group.grads.f32()[i] = 0.0f;
  }
  AdamW optimizer(*backend, {group}, AdamWHyperParams{0.9, 0.95, 1e-8, 0.5});
  optimizer.step(0.1, 1.0);
  EXPECT_FLOAT_EQ(group.params.f32()[0], 0.95f);  // decayed by 1 - lr * wd
  EXPECT_FLOAT_EQ(group.params.f32()[2], 1.0f);   // exempt from decay
}

TEST_P(AdamWTest, RejectsSpansThatDoNotTileTheGroup) {
  Buffer params(*backend, 8 * sizeof(float), MemoryCategory::trainable_weights);
  Buffer grads(*backend, 8 * sizeof(float), MemoryCategory::gradients);
  OptimizerGroup group{params.as(DType::f32, {8}), grads.as(DType::f32, {8}), {{0, 4, true}}, {}};
  EXPECT_THROW(AdamW(*backend, {group}, {}), Error);
}

TEST_P(AdamWTest, GlobalNormAndClipCoefficientFollowTorch) {
  Buffer a(*backend, 2 * sizeof(float), MemoryCategory::gradients);
  Buffer b(*backend, 1 * sizeof(float), MemoryCategory::gradients);
  std::vector<OptimizerGroup> groups(2);
  groups[0].grads = a.as(DType::f32, {2});
  groups[1].grads = b.as(DType::f32, {1});
  groups[0].grads.f32()[0] = 3.0f;
  groups[0].grads.f32()[1] = 0.0f;
  groups[1].grads.f32()[0] = 4.0f;
  const double norm = global_grad_norm(*backend, groups);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_DOUBLE_EQ(clip_coefficient(norm, 1.0), 1.0 / (5.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip_coefficient(norm, 10.0), 1.0);  // clamped: never scales up
  EXPECT_DOUBLE_EQ(clip_coefficient(norm, 0.0), 1.0);   // clipping off
}

INSTANTIATE_TEST_SUITE_P(Backends, AdamWTest, ::testing::Values("cpu-ref", "cpu"));

}  // namespace
}  // namespace anvil
