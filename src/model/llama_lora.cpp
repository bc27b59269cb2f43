// LlamaModel's adapter and storage services: adapter init and merge, and per-parameter access
// that hides whether the base is held in f32 or bf16.
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "model/parameter_table.h"

namespace anvil {

void LlamaModel::init_lora(uint64_t seed) {
  ANVIL_CHECK(lora_.enabled(), "[lora] init_lora on a model without adapters (lora.r = 0)");
  ANVIL_CHECK(!options_.tp.enabled(), "[lora] under tensor parallelism the parallel layer "
              "initialises each shard's adapters (DataParallelEngine::init_weights)");
  lora_.init(seed);
}

void LlamaModel::merge_lora() {
  ANVIL_CHECK(lora_.enabled(), "[lora] merge_lora on a model without adapters (lora.r = 0)");
  ANVIL_CHECK(params_.dtype() == DType::f32,
              "[lora] merging needs an f32 base; this model holds its base in {}",
              dtype_name(params_.dtype()));
  const float scale = options_.lora.scale();
  for (int l = 0; l < config_.n_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    const LoraLayerViews& adapters = lora_.layer(l);
    for (int i = 0; i < kLoraTargetCount; ++i) {
      if (!adapters.a[i].defined()) continue;
      const Tensor& base = w.*(lora_target_rows()[static_cast<size_t>(i)]->layer_field);
      // W (out, in) += scale * B (out, r) @ A (r, in), then B = 0 removes the adapter path.
      backend_->matmul(adapters.b[i], adapters.a[i], base, false, false, scale, 1.0f);
      backend_->fill_zero(adapters.b[i]);
    }
  }
}

void LlamaModel::set_parameter(int index, const float* host) {
  write_f32_values(*backend_, params_.tensor(index), host);
}

void LlamaModel::get_parameter(int index, float* host) {
  read_f32_values(*backend_, params_.tensor(index), host);
}

void LlamaModel::init_trainable_group(int group, uint64_t seed, float* host) const {
  if (lora_.enabled()) {
    init_lora_group(*full_lora_layout_, group, seed, host);
  } else {
    init_llama_group(full_config_, *full_layout_, group, seed, host);
  }
}

}  // namespace anvil
