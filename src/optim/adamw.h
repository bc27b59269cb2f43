// AdamW over flat parameter groups. A group is one flat f32 parameter buffer with a gradient
// buffer of the same layout (the model keeps one per layer); the optimizer owns f32 first and
// second moments with that same layout, so sharding a group shards its state identically.
// Spans inside a group say which elements take weight decay (matrices) and which do not
// (norms, biases, and embeddings unless asked). The update is torch.optim.AdamW's
// (decoupled decay, bias correction), executed by the backend's adamw_step_many: one
// multi-tensor update per step (one launch on a device), whatever the number of spans.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"

namespace anvil {

// A run of consecutive elements of a group with one weight-decay setting.
struct ParamSpan {
  int64_t offset = 0;
  int64_t count = 0;
  bool weight_decay = true;
};

// One flat parameter buffer, its gradient (same layout) and its decay spans.
struct OptimizerGroup {
  Tensor params;  // f32 (n)
  Tensor grads;   // f32 (n)
  std::vector<ParamSpan> spans;
  // Optional low-precision copy (n) that receives the updated parameters (e.g. bf16 weights).
  Tensor param_copy;
};

struct AdamWHyperParams {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// A named view of optimizer state, for checkpoints ("adamw.m.3", "adamw.v.3").
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

class AdamW {
 public:
  // Allocates zeroed moments for every group on `backend`. Spans must tile each group exactly.
  AdamW(Backend& backend, std::vector<OptimizerGroup> groups, AdamWHyperParams hyper);

  // Applies one update at learning rate `lr`, multiplying every gradient by `grad_scale`
  // first (the clip coefficient), and advances the step counter.
  void step(double lr, double grad_scale);
  // The same update one group at a time (an offloaded optimizer steps groups as their
  // gradients arrive): begin_step advances the counter, then step_group(g, ...) updates
  // group g with it; calling step_group once for every group equals step().
  void begin_step() { ++step_count_; }
  void step_group(size_t group, double lr, double grad_scale);

  // Returns the number of updates applied so far (0 before the first).
  int64_t step_count() const { return step_count_; }
  // Sets the counter when restoring a checkpoint.
  void set_step_count(int64_t steps);

  // Returns the moment tensors with stable names, in group order (m then v per group).
  std::vector<NamedTensor> state_tensors() const;
  // Returns the groups the optimizer updates.
  const std::vector<OptimizerGroup>& groups() const { return groups_; }

 private:
  // Returns the step's parameters at the current step count (weight decay per set).
  AdamWParams update_params(double lr, double grad_scale) const;
  // Appends group g's spans as tensor sets of one multi-tensor update.
  void append_sets(size_t group, std::vector<AdamWTensors>& sets) const;

  Backend& backend_;
  std::vector<OptimizerGroup> groups_;
  AdamWHyperParams hyper_;
  std::vector<Buffer> m_buffers_;
  std::vector<Buffer> v_buffers_;
  int64_t step_count_ = 0;
};

// Returns the L2 norm of all gradients of all groups (sqrt of the summed squares, in double).
double global_grad_norm(Backend& backend, const std::vector<OptimizerGroup>& groups);

// Returns the factor gradients are multiplied by to clip their global norm to `max_norm`:
// min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_; 1 when max_norm <= 0.
double clip_coefficient(double grad_norm, double max_norm);

}  // namespace anvil
