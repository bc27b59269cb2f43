// AdamW bookkeeping: moment allocation, per-span decay, the step counter and the global
// gradient norm. The arithmetic of the update itself lives in the backend (adamw_step), so the
// same optimizer runs wherever the parameters live.
#include "optim/adamw.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace anvil {
namespace {

void check_group_layout(const OptimizerGroup& group, size_t index) {
  ANVIL_CHECK(group.params.dtype == DType::f32 && group.grads.dtype == DType::f32,
              "[adamw] group {}: parameters and gradients must be f32", index);
  ANVIL_CHECK(group.params.numel() == group.grads.numel(),
              "[adamw] group {}: {} parameters but {} gradients", index, group.params.numel(),
              group.grads.numel());
  ANVIL_CHECK(!group.param_copy.defined() || group.param_copy.numel() == group.params.numel(),
              "[adamw] group {}: the parameter copy has {} elements, expected {}", index,
              group.param_copy.numel(), group.params.numel());
  int64_t next = 0;
  for (const ParamSpan& span : group.spans) {
    ANVIL_CHECK(span.offset == next && span.count > 0,
                "[adamw] group {}: spans must tile the group in order (span at {} of {}, "
                "expected offset {})",
                index, span.offset, span.count, next);
    next += span.count;
  }
  ANVIL_CHECK(next == group.params.numel(), "[adamw] group {}: spans cover {} of {} elements",
              index, next, group.params.numel());
}

}  // namespace

AdamW::AdamW(Backend& backend, std::vector<OptimizerGroup> groups, AdamWHyperParams hyper)
    : backend_(backend), groups_(std::move(groups)), hyper_(hyper) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    check_group_layout(groups_[g], g);
    const int64_t n = groups_[g].params.numel();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    m_buffers_.emplace_back(backend_, bytes, MemoryCategory::optimizer_state);
    v_buffers_.emplace_back(backend_, bytes, MemoryCategory::optimizer_state);
    backend_.fill_zero(m_buffers_.back().as(DType::f32, {n}));
    backend_.fill_zero(v_buffers_.back().as(DType::f32, {n}));
  }
}

void AdamW::step(double lr, double grad_scale) {
  begin_step();
  std::vector<AdamWTensors> sets;
  for (size_t g = 0; g < groups_.size(); ++g) append_sets(g, sets);
  backend_.adamw_step_many(sets, update_params(lr, grad_scale));
}

void AdamW::step_group(size_t group_index, double lr, double grad_scale) {
  ANVIL_CHECK(group_index < groups_.size(), "[adamw] group {} of {}", group_index,
              groups_.size());
  std::vector<AdamWTensors> sets;
  append_sets(group_index, sets);
  backend_.adamw_step_many(sets, update_params(lr, grad_scale));
}

AdamWParams AdamW::update_params(double lr, double grad_scale) const {
  AdamWParams params;
  params.lr = static_cast<float>(lr);
  params.beta1 = static_cast<float>(hyper_.beta1);
  params.beta2 = static_cast<float>(hyper_.beta2);
  params.eps = static_cast<float>(hyper_.eps);
  params.step = step_count_;
  params.grad_scale = static_cast<float>(grad_scale);
  return params;
}

void AdamW::append_sets(size_t group_index, std::vector<AdamWTensors>& sets) const {
  const OptimizerGroup& group = groups_[group_index];
  const int64_t n = group.params.numel();
  const Tensor m = m_buffers_[group_index].as(DType::f32, {n});
  const Tensor v = v_buffers_[group_index].as(DType::f32, {n});
  const float decay = static_cast<float>(hyper_.weight_decay);
  for (const ParamSpan& span : group.spans) {
    AdamWTensors set;
    set.param = group.params.flat(span.offset, span.count);
    set.grad = group.grads.flat(span.offset, span.count);
    set.m = m.flat(span.offset, span.count);
    set.v = v.flat(span.offset, span.count);
    if (group.param_copy.defined()) set.param_copy = group.param_copy.flat(span.offset, span.count);
    set.weight_decay = span.weight_decay ? decay : 0.0f;
    sets.push_back(set);
  }
}

void AdamW::set_step_count(int64_t steps) {
  ANVIL_CHECK(steps >= 0, "[adamw] step count must be >= 0, got {}", steps);
  step_count_ = steps;
}

std::vector<NamedTensor> AdamW::state_tensors() const {
  std::vector<NamedTensor> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t n = groups_[g].params.numel();
    out.push_back({fmt::format("adamw.m.{}", g), m_buffers_[g].as(DType::f32, {n})});
    out.push_back({fmt::format("adamw.v.{}", g), v_buffers_[g].as(DType::f32, {n})});
  }
  return out;
}

double global_grad_norm(Backend& backend, const std::vector<OptimizerGroup>& groups) {
  double total = 0.0;
  for (const OptimizerGroup& group : groups) total += backend.sum_squares(group.grads);
  return std::sqrt(total);
}

double clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  const double coefficient = max_norm / (grad_norm + 1e-6);
  return coefficient < 1.0 ? coefficient : 1.0;
}

}  // namespace anvil
