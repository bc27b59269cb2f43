// LlamaModel's adapter and storage services: adapter init and merge, the memory breakdown,
// and per-parameter access that hides whether the base lives in f32 masters or in the
// bf16-only store of a frozen LoRA base.
#include <vector>

#include "core/error.h"
#include "model/llama.h"

namespace anvil {

namespace {

// Returns the f32 bytes of every group of a layout (padding included).
size_t layout_bytes(const ParameterLayout& layout, size_t element_bytes) {
  size_t bytes = 0;
  for (int g = 0; g < layout.group_count(); ++g)
    bytes += static_cast<size_t>(layout.group_numel(g)) * element_bytes;
  return bytes;
}

}  // namespace

void LlamaModel::init_lora(uint64_t seed) {
  ANVIL_CHECK(lora_.enabled(), "[lora] init_lora on a model without adapters (lora.r = 0)");
  lora_.init(seed);
}

void LlamaModel::merge_lora() {
  ANVIL_CHECK(lora_.enabled(), "[lora] merge_lora on a model without adapters (lora.r = 0)");
  ANVIL_CHECK(!frozen_.enabled(),
              "[lora] merging needs an f32 base; this model stores its base in bf16 only");
  const float scale = options_.lora.scale();
  for (int l = 0; l < config_.n_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    const std::array<Tensor, kLoraTargetCount> base = {w.wq, w.wk,     w.wv,    w.wo,
                                                       w.w_gate, w.w_up, w.w_down};
    const LoraLayerViews& adapters = lora_.layer(l);
    for (int i = 0; i < kLoraTargetCount; ++i) {
      if (!adapters.a[i].defined()) continue;
      // W (out, in) += scale * B (out, r) @ A (r, in), then B = 0 removes the adapter path.
      backend_->matmul(adapters.b[i], adapters.a[i], base[i], false, false, scale, 1.0f);
      backend_->fill_zero(adapters.b[i]);
    }
  }
}

ModelMemory LlamaModel::memory() const {
  ModelMemory memory;
  memory.activations = arena_.bytes();
  const ParameterLayout& layout = *layout_;
  const size_t compute_copy_bytes =
      compute_.enabled() ? layout_bytes(layout, dtype_size(options_.compute_dtype)) : 0;
  if (lora_.enabled()) {
    memory.base_weights = frozen_.enabled() ? frozen_.bytes() : layout_bytes(layout, sizeof(float));
    memory.trainable = lora_.parameter_bytes();
    memory.gradients = lora_.gradient_bytes();
    memory.trainable_count = lora_.parameters().layout().total_params();
    return memory;
  }
  memory.base_weights = compute_copy_bytes;
  memory.trainable = options_.allocate_weights ? layout_bytes(layout, sizeof(float)) : 0;
  memory.gradients = options_.allocate_gradients ? layout_bytes(layout, sizeof(float)) : 0;
  memory.trainable_count = layout.total_params();
  return memory;
}

void LlamaModel::set_parameter(int index, const float* host) {
  if (frozen_.enabled()) {
    frozen_.set(index, host);
    return;
  }
  backend_->copy_from_host(params_.tensor(index), host);
}

void LlamaModel::get_parameter(int index, float* host) {
  if (frozen_.enabled()) {
    frozen_.get(index, host);
    return;
  }
  backend_->copy_to_host(host, params_.tensor(index));
}

}  // namespace anvil
