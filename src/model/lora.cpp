// LoRA adapter layout, names, initialisation and the per-projection forward/backward math.
// Each adapted projection keeps h = drop(x) A^T (N, r) from the forward pass; the dropped
// input is re-created in backward from the same seed instead of being stored.
#include "model/lora.h"

#include <algorithm>

#include "core/counter_hash.h"
#include "core/error.h"
#include "model/llama_parameters.h"
#include "model/parameter_table.h"
#include "model/random.h"

namespace anvil {

namespace {

int index_of(LoraTarget target) { return static_cast<int>(target); }

// Returns the dropout seed of one target from the layer's seed.
uint64_t target_seed(uint64_t layer_seed, LoraTarget target) {
  return dropout_hash(layer_seed, static_cast<uint64_t>(index_of(target)) + 1);
}

// Returns whether tensor parallelism splits the target's base on its input (A split, hidden
// state summed over tp) or on its output (B split, hidden gradient summed over tp).
bool input_split(const LoraLayerStep& step, LoraTarget target) {
  return step.tp.enabled() &&
         lora_target_rows()[static_cast<size_t>(index_of(target))]->tp_split == TpSplit::row;
}
bool output_split(const LoraLayerStep& step, LoraTarget target) {
  return step.tp.enabled() &&
         lora_target_rows()[static_cast<size_t>(index_of(target))]->tp_split == TpSplit::column;
}

// Returns the dropout seed of a target in this step. An input-split target's tp ranks hold
// different columns of x, so each draws its own mask (masks of one column block repeated on
// every rank would correlate the ranks' dropout).
uint64_t step_target_seed(const LoraLayerStep& step, LoraTarget target) {
  const uint64_t seed = target_seed(step.dropout_seed, target);
  if (!input_split(step, target)) return seed;
  return dropout_hash(seed, static_cast<uint64_t>(step.tp.rank) + 1);
}

// Returns t (any shape) viewed as (rows, cols).
Tensor as_rows(const Tensor& t, int64_t cols) { return t.view(Shape{t.numel() / cols, cols}); }

}  // namespace

std::string lora_param_name(int layer, const std::string& target, char which) {
  ANVIL_CHECK(which == 'A' || which == 'B', "[lora] adapter matrix must be 'A' or 'B', got '{}'",
              which);
  // PEFT replaces the wrapped Linear's ".weight" by ".lora_A.weight" / ".lora_B.weight".
  const std::string base = hf_param_name(lora_target_row(target), layer);
  const std::string module = base.substr(0, base.size() - std::string_view(".weight").size());
  return module + ".lora_" + which + ".weight";
}

std::array<int64_t, 2> lora_target_dims(const LlamaConfig& config, LoraTarget target) {
  ANVIL_CHECK(index_of(target) >= 0 && index_of(target) < kLoraTargetCount,
              "[lora] invalid target {}", index_of(target));
  return param_dims(*lora_target_rows()[static_cast<size_t>(index_of(target))], config);
}

std::shared_ptr<const ParameterLayout> make_lora_layout(const LlamaConfig& config,
                                                        const LoraOptions& options) {
  validate_lora_options(options);
  std::array<bool, kLoraTargetCount> enabled{};
  for (const std::string& target : options.targets)
    enabled[index_of(parse_lora_target(target))] = true;
  auto layout = std::make_shared<ParameterLayout>();
  layout->ensure_groups(1);
  for (int l = 0; l < config.n_layers; ++l) {
    layout->ensure_groups(layer_group(l) + 1);
    for (int i = 0; i < kLoraTargetCount; ++i) {
      if (!enabled[i]) continue;
      const auto [out, in] = lora_target_dims(config, static_cast<LoraTarget>(i));
      const std::string& name = lora_target_names()[i];
      // Under tensor parallelism A follows the base's input split (row-parallel bases) and B
      // its output split (column-parallel bases); the other factor is replicated.
      const TpSplit split = lora_target_rows()[static_cast<size_t>(i)]->tp_split;
      layout->add(lora_param_name(l, name, 'A'), layer_group(l), Shape{options.r, in}, true,
                  split == TpSplit::row ? 1 : -1);
      layout->add(lora_param_name(l, name, 'B'), layer_group(l), Shape{out, options.r}, true,
                  split == TpSplit::column ? 0 : -1);
    }
  }
  layout->ensure_groups(head_group(config) + 1);
  return layout;
}

LoraLayerViews lora_layer_views(const LlamaConfig& config, const LoraOptions& options,
                                const ParameterSet& set, int layer) {
  (void)config;
  LoraLayerViews views;
  if (!set.has_storage(layer_group(layer))) return views;
  for (const std::string& target : options.targets) {
    const int i = index_of(parse_lora_target(target));
    views.a[i] = set.tensor(lora_param_name(layer, target, 'A'));
    views.b[i] = set.tensor(lora_param_name(layer, target, 'B'));
  }
  return views;
}

bool LoraLayerStep::adapted(LoraTarget target) const {
  return weights != nullptr && weights->a[index_of(target)].defined();
}

void lora_forward(const LoraLayerStep& step, LoraTarget target, const Tensor& x, const Tensor& y) {
  if (!step.adapted(target)) return;
  Backend& backend = *step.backend;
  const int i = index_of(target);
  const Tensor& a = step.weights->a[i];
  const Tensor& b = step.weights->b[i];
  const int64_t in = a.shape[1], out = b.shape[0];
  Tensor input = as_rows(x, in);
  if (step.dropout > 0.0f) {
    const Tensor dropped = step.dropped_input.flat(0, input.numel()).view(input.shape);
    backend.dropout(input, dropped, step.dropout, step_target_seed(step, target));
    input = dropped;
  }
  const Tensor& hidden = step.hidden[i];
  backend.matmul(input, a, hidden, false, true);
  if (input_split(step, target)) step.tp.ops->all_reduce(hidden);
  const Tensor y2 = as_rows(y, out);
  const Tensor rows = y2.shape[0] == hidden.shape[0]
                          ? hidden
                          : hidden.slice(step.row_begin, step.row_begin + y2.shape[0]);
  backend.matmul(rows, b, y2, false, true, step.scale, 1.0f);
}

void lora_backward(const LoraLayerStep& step, LoraTarget target, const Tensor& x,
                   const Tensor& dy, const Tensor& dx) {
  if (!step.adapted(target)) return;
  Backend& backend = *step.backend;
  const int i = index_of(target);
  const Tensor& a = step.weights->a[i];
  const Tensor& b = step.weights->b[i];
  const int64_t in = a.shape[1], out = b.shape[0];
  const Tensor dy2 = as_rows(dy, out);
  const Tensor& hidden = step.hidden[i];
  const Tensor d_hidden = step.d_hidden;
  // dB += scale * dy^T h; dh = scale * dy B.
  backend.matmul(dy2, hidden, step.gradients->b[i], true, false, step.scale, 1.0f);
  backend.matmul(dy2, b, d_hidden, false, false, step.scale, 0.0f);
  Tensor input = as_rows(x, in);
  const Tensor dx2 = as_rows(dx, in);
  if (step.dropout > 0.0f) {
    const uint64_t seed = step_target_seed(step, target);
    const Tensor dropped = step.dropped_input.flat(0, input.numel()).view(input.shape);
    backend.dropout(input, dropped, step.dropout, seed);
    const Tensor d_input = step.d_input.flat(0, dx2.numel()).view(dx2.shape);
    backend.matmul(d_hidden, a, d_input, false, false);
    backend.dropout(d_input, d_input, step.dropout, seed);
    backend.add(dx2, d_input, dx2);
    input = dropped;
  } else {
    backend.matmul(d_hidden, a, dx2, false, false, 1.0f, 1.0f);
  }
  // dx took this rank's partial dh, as the base's input gradient does; dA needs all of it.
  if (output_split(step, target)) step.tp.ops->all_reduce(d_hidden);
  backend.matmul(d_hidden, input, step.gradients->a[i], true, false, 1.0f, 1.0f);
}

}  // namespace anvil
