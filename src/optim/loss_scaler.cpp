#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace anvil {
namespace {

bool is_power_of_two(double value) {
  if (!(value > 0.0) || !std::isfinite(value)) return false;
  int exponent = 0;
  return std::frexp(value, &exponent) == 0.5;
}

}  // namespace

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options) : options_(options) {
  ANVIL_CHECK(is_power_of_two(options.initial_scale),
              "[loss scale] the initial scale must be a positive power of two, got {}",
              options.initial_scale);
  ANVIL_CHECK(is_power_of_two(options.min_scale),
              "[loss scale] the minimum scale must be a positive power of two, got {}",
              options.min_scale);
  ANVIL_CHECK(options.growth_interval > 0,
              "[loss scale] the growth interval must be at least 1 step, got {}",
              options.growth_interval);
  state_.scale = std::max(options.initial_scale, options.min_scale);
}

bool DynamicLossScaler::update(bool finite) {
  if (!finite) {
    state_.clean_steps = 0;
    const double halved = std::max(state_.scale * 0.5, options_.min_scale);
    const bool changed = halved != state_.scale;
    state_.scale = halved;
    return changed;
  }
  if (++state_.clean_steps < options_.growth_interval) return false;
  state_.clean_steps = 0;
  // Doubling stops at the largest power of two f32 holds (the scale reaches the kernels as f32).
  if (state_.scale >= 0x1p127) return false;
  state_.scale *= 2.0;
  return true;
}

void DynamicLossScaler::restore(const LossScalerState& state) {
  ANVIL_CHECK(is_power_of_two(state.scale),
              "[loss scale] a checkpoint's loss scale must be a positive power of two, got {}",
              state.scale);
  ANVIL_CHECK(state.clean_steps >= 0, "[loss scale] a checkpoint's clean step count is {}",
              state.clean_steps);
  state_ = state;
}

}  // namespace anvil
