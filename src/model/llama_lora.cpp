// LlamaModel's adapter and storage services: adapter init and merge, the memory breakdown,
// and per-parameter access that hides whether the base is held in f32 or bf16.
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "model/parameter_table.h"

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

ModelMemory LlamaModel::memory() const {
  ModelMemory memory;
  // The ring attention's buffers (context parallelism) hold activations and their gradients.
  memory.activations = arena_.bytes() + (cp_scratch_ ? cp_scratch_->bytes() : 0);
  const ParameterLayout& layout = *layout_;
  memory.compute_copies =
      compute_.enabled() ? layout_bytes(layout, dtype_size(options_.compute_dtype)) : 0;
  if (lora_.enabled()) {
    memory.frozen = (options_.allocate_frozen ? layout_bytes(layout, dtype_size(params_.dtype()))
                                              : 0) +
                    bf16_base_.bytes();
    memory.trainable = options_.allocate_weights ? lora_.parameter_bytes() : 0;
    memory.compute_copies += lora_.compute_copy_bytes();
    memory.gradients = options_.allocate_gradients ? lora_.gradient_bytes() : 0;
    memory.trainable_count = lora_.parameters().layout().total_params();
    return memory;
  }
  memory.trainable = options_.allocate_weights ? layout_bytes(layout, sizeof(float)) : 0;
  memory.gradients = options_.allocate_gradients ? layout_bytes(layout, sizeof(float)) : 0;
  memory.trainable_count = layout.total_params();
  return memory;
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
