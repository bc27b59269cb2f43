// LlamaConfig mapping and AdamW hyper-parameters (see model_setup.h).
#include "train/model_setup.h"

#include <algorithm>

#include "train/base_model.h"
#include "train/data_sources.h"

namespace anvil {

ModelOptions model_options_from(const TrainConfig& config) {
  ModelOptions options;
  options.max_batch =
      static_cast<int>(std::max(config.training.batch_size, eval_batch_size(config)));
  options.max_seq = static_cast<int>(config.training.seq_len / config.parallel.cp);
  // "fp16" is the configuration's spelling of f16 (PyTorch's and DeepSpeed's).
  options.compute_dtype =
      config.training.dtype == "fp16" ? DType::f16 : parse_dtype(config.training.dtype);
  options.activation_checkpointing = config.training.activation_checkpointing;
  options.decay_embeddings = config.optimizer.decay_embeddings;
  options.attention = attention_schedule_from(config.attention);
  options.lora = lora_options_from(config.lora);
  if (options.lora.enabled() && config.lora.base_dtype != "auto")
    options.lora_base_dtype = parse_dtype(config.lora.base_dtype);
  options.tp.sequence_parallel = config.parallel.sequence_parallel;
  return options;
}

LlamaConfig llama_config_from(const ModelConfigSection& model) {
  LlamaConfig config;
  config.dim = static_cast<int>(model.dim);
  config.n_layers = static_cast<int>(model.n_layers);
  config.n_heads = static_cast<int>(model.n_heads);
  config.n_kv_heads = static_cast<int>(model.n_kv_heads);
  config.head_dim = static_cast<int>(model.head_dim);
  config.ffn_dim = static_cast<int>(model.ffn_dim);
  config.vocab_size = static_cast<int>(model.vocab_size);
  config.max_seq_len = static_cast<int>(model.max_seq_len);
  config.rope_theta = static_cast<float>(model.rope_theta);
  config.rope_scaling_factor = static_cast<float>(model.rope_scaling_factor);
  config.rope_low_freq_factor = static_cast<float>(model.rope_low_freq_factor);
  config.rope_high_freq_factor = static_cast<float>(model.rope_high_freq_factor);
  config.rope_original_max_position = static_cast<int>(model.rope_original_max_position);
  config.norm_eps = static_cast<float>(model.norm_eps);
  config.tie_embeddings = model.tie_embeddings;
  config.attention_bias = model.attention_bias;
  return config;
}

ModelConfigSection model_section_from(const LlamaConfig& config) {
  ModelConfigSection model;
  model.dim = config.dim;
  model.n_layers = config.n_layers;
  model.n_heads = config.n_heads;
  model.n_kv_heads = config.n_kv_heads;
  model.head_dim = config.head_dim;
  model.ffn_dim = config.ffn_dim;
  model.vocab_size = config.vocab_size;
  model.max_seq_len = config.max_seq_len;
  model.rope_theta = config.rope_theta;
  model.rope_scaling_factor = config.rope_scaling_factor;
  model.rope_low_freq_factor = config.rope_low_freq_factor;
  model.rope_high_freq_factor = config.rope_high_freq_factor;
  model.rope_original_max_position = config.rope_original_max_position;
  model.norm_eps = config.norm_eps;
  model.tie_embeddings = config.tie_embeddings;
  model.attention_bias = config.attention_bias;
  return model;
}

AttentionSchedule attention_schedule_from(const AttentionConfigSection& attention) {
  AttentionSchedule schedule;
  schedule.pattern = attention.pattern == "strided" ? SparsePattern::strided
                     : attention.pattern == "lines" ? SparsePattern::lines
                                                    : SparsePattern::dense;
  schedule.segment = static_cast<int>(attention.segment);
  schedule.stride = static_cast<int>(attention.stride);
  schedule.window = static_cast<int>(attention.window);
  schedule.sinks = static_cast<int>(attention.sinks);
  schedule.dense_every = static_cast<int>(attention.dense_every);
  return schedule;
}

AdamWHyperParams adamw_hyper_params_from(const OptimizerConfigSection& optimizer) {
  AdamWHyperParams hyper;
  hyper.beta1 = optimizer.beta1;
  hyper.beta2 = optimizer.beta2;
  hyper.eps = optimizer.eps;
  hyper.weight_decay = optimizer.weight_decay;
  return hyper;
}

}  // namespace anvil
