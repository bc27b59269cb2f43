// Dynamic loss scaling for fp16 training. fp16 holds magnitudes from about 6e-8 to 65504, and
// the gradients of a language model's activations sit largely below that range: the loss is
// multiplied by a scale S before the backward pass so they stay representable, and the f32
// gradients are divided by S before the optimizer sees them. S starts large; a step whose
// gradients overflowed (any inf or nan) is skipped and S halves; after `growth_interval` clean
// steps in a row S doubles. The scheme and its defaults are torch.cuda.amp.GradScaler's.
// S stays a power of two, so scaling and unscaling f32 values is exact (no overflow, no
// subnormals): a run with loss scaling equals the run without it bit for bit until a step
// overflows.
#pragma once

#include <cstdint>

namespace anvil {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16
  int64_t growth_interval = 2000;  // clean steps before the scale doubles
  double min_scale = 1.0;          // the scale never halves below this
};

// What a checkpoint keeps of the scaler.
struct LossScalerState {
  double scale = 65536.0;
  int64_t clean_steps = 0;  // clean steps since the last change
};

class DynamicLossScaler {
 public:
  // Throws when the initial or minimum scale is not a positive power of two, or the growth
  // interval is not positive.
  explicit DynamicLossScaler(const LossScalerOptions& options);

  // Returns the scale the next step's loss is multiplied by.
  double scale() const { return state_.scale; }

  // Records a step: `finite` is false when its gradients overflowed (the step was skipped).
  // Returns true when the scale changed.
  bool update(bool finite);

  const LossScalerState& state() const { return state_; }
  // Restores the state of a checkpoint; throws for a scale that is not a power of two.
  void restore(const LossScalerState& state);

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace anvil
