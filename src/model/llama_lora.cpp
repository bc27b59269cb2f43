// LlamaModel's adapter and storage services: adapter init and merge, the bytes of its buffers
// by purpose (built or planned) and the planned activation views, and per-parameter access that
// hides whether the base is held in f32 or bf16.
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "model/parameter_table.h"
#include "model/tensor_parallel.h"

namespace anvil {
namespace {

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

ModelMemory LlamaModel::parameter_memory(const LlamaConfig& shard_config,
                                         const ModelOptions& options) {
  ModelMemory memory;
  const auto layout = make_llama_layout(shard_config, options.decay_embeddings);
  const DType base_dtype = frozen_base_dtype(options);
  // A bf16 base computes as it is (Bf16BaseViews); an f32 master set in a bf16 model has
  // compute-dtype copies (ComputeWeights) unless the parallel layer binds gathered ones.
  if (base_dtype != DType::bf16 && options.compute_dtype != DType::f32 &&
      (options.allocate_compute_copies || options.lora.enabled()))
    memory.compute_copies = layout_bytes(*layout, dtype_size(options.compute_dtype));
  if (options.lora.enabled()) {
    const auto adapters = make_lora_layout(shard_config, options.lora);
    const size_t adapter_bytes = layout_bytes(*adapters, sizeof(float));
    memory.frozen = (options.allocate_frozen ? layout_bytes(*layout, dtype_size(base_dtype)) : 0) +
                    (base_dtype == DType::bf16 ? Bf16BaseViews::planned_bytes(shard_config) : 0);
    memory.trainable = options.allocate_weights ? adapter_bytes : 0;
    if (options.compute_dtype != DType::f32)
      memory.compute_copies += layout_bytes(*adapters, dtype_size(options.compute_dtype));
    memory.gradients = options.allocate_gradients ? adapter_bytes : 0;
    memory.trainable_count = adapters->total_params();
    return memory;
  }
  memory.trainable = options.allocate_weights ? layout_bytes(*layout, sizeof(float)) : 0;
  memory.gradients = options.allocate_gradients ? layout_bytes(*layout, sizeof(float)) : 0;
  memory.trainable_count = layout->total_params();
  return memory;
}

ModelMemory LlamaModel::memory() const {
  ModelMemory memory = parameter_memory(config_, options_);
  memory.activations = arena_.bytes();
  if (cp_scratch_) {
    const ContextParallelScratch::Bytes ring = cp_scratch_->bytes();
    memory.ring_blocks = ring.communication;
    memory.ring_scratch = ring.workspace;
  }
  return memory;
}

ModelMemory LlamaModel::planned_memory(const LlamaConfig& config, const ModelOptions& options) {
  const LlamaConfig shard_config = tp_shard_config(config, options.tp.size);
  const ModelOptions resolved = resolved_options(shard_config, options);
  check_options(shard_config, resolved);
  ModelMemory memory = parameter_memory(shard_config, resolved);
  ModelActivations acts;
  LoraActivations lora;
  Tensor norm_grad_sink;
  VocabParallelScratch vocab_parallel;
  memory.activations = Arena::measure([&](Arena& arena) {
    carve_arena(arena, shard_config, resolved, acts, lora, norm_grad_sink, vocab_parallel);
  });
  if (resolved.cp.enabled()) {
    const ContextParallelScratch::Bytes ring = ContextParallelScratch::planned_bytes(
        shard_config, resolved.cp.size, resolved.max_batch, resolved.max_seq,
        resolved.compute_dtype);
    memory.ring_blocks = ring.communication;
    memory.ring_scratch = ring.workspace;
  }
  return memory;
}

ModelActivations LlamaModel::planned_activations(const LlamaConfig& config,
                                                 const ModelOptions& options) {
  const LlamaConfig shard_config = tp_shard_config(config, options.tp.size);
  const ModelOptions resolved = resolved_options(shard_config, options);
  check_options(shard_config, resolved);
  ModelActivations acts;
  LoraActivations lora;
  Tensor norm_grad_sink;
  VocabParallelScratch vocab_parallel;
  Arena::measure([&](Arena& arena) {
    carve_arena(arena, shard_config, resolved, acts, lora, norm_grad_sink, vocab_parallel);
  });
  return acts;
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
