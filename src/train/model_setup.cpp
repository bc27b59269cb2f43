// LlamaConfig mapping and AdamW hyper-parameters (see model_setup.h).
#include "train/model_setup.h"

namespace anvil {

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
  config.norm_eps = static_cast<float>(model.norm_eps);
  config.tie_embeddings = model.tie_embeddings;
  config.attention_bias = model.attention_bias;
  return config;
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
