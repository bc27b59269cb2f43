// LlamaConfig: the architecture hyper-parameters of the Llama family (Llama 2/3/3.1/3.2,
// TinyLlama, SmolLM, Mistral without sliding window, Qwen2 with q/k/v bias, DeepSeek-LLM),
// named after the Hugging Face config.json fields they come from. A config is plain data;
// validate() is the single place that decides whether it describes a model anvil can build,
// and every consumer (layout, model, planner) may assume a validated config.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace anvil {

struct LlamaConfig {
  int dim = 0;          // hidden_size
  int n_layers = 0;     // num_hidden_layers
  int n_heads = 0;      // num_attention_heads
  int n_kv_heads = 0;   // num_key_value_heads (GQA when < n_heads)
  int head_dim = 0;     // head_dim; 0 means dim / n_heads
  int ffn_dim = 0;      // intermediate_size
  int vocab_size = 0;   // vocab_size
  int max_seq_len = 0;  // max_position_embeddings
  float rope_theta = 10000.0f;
  // rope_scaling of type "llama3" (Llama 3.1+); off when rope_scaling_factor == 0.
  float rope_scaling_factor = 0.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_position = 8192;
  float norm_eps = 1e-5f;       // rms_norm_eps
  bool tie_embeddings = false;  // tie_word_embeddings: lm_head reuses embed_tokens
  bool attention_bias = false;  // Qwen2: q/k/v projections carry a bias

  // Throws anvil::Error ("[config] ...") naming the first field that makes no sense.
  void validate() const;

  // Returns head_dim, resolving 0 to dim / n_heads.
  int resolved_head_dim() const {
    return head_dim > 0 ? head_dim : (n_heads > 0 ? dim / n_heads : 0);
  }
  // Returns the width of the query projection output, n_heads * head_dim.
  int q_dim() const { return n_heads * resolved_head_dim(); }
  // Returns the width of each key/value projection output, n_kv_heads * head_dim.
  int kv_dim() const { return n_kv_heads * resolved_head_dim(); }
  // Returns the RoPE parameters the backend's rope op takes.
  RopeParams rope_params() const;

  // Returns the number of trainable parameters (embeddings counted once when tied).
  int64_t param_count() const;
  // Returns the parameters that take part in matrix multiplies: every projection plus the
  // output head (the embedding matrix when tied; the embedding lookup itself is not counted).
  int64_t matmul_param_count() const;
  // Returns the training FLOPs per token (forward + backward) at context length seq_len:
  //   6 * matmul_param_count() + 12 * n_layers * seq_len * n_heads * head_dim
  // The first term is 2 FLOPs per multiply-add, times 3 for forward, input grad and weight
  // grad; the second counts q k^T and p v (2 * 2 * seq_len * n_heads * head_dim forward per
  // layer, times 3), without halving for the causal mask (the PaLM convention used for MFU).
  // A sparse attention mask scales the second term by attention_fraction, its visible pairs
  // over dense causal attention's (AttentionSchedule::mean_visible_fraction).
  double flops_per_token(int seq_len, double attention_fraction = 1.0) const;

  // Returns a one-line summary ("dim=64 layers=2 heads=4/2 ...") for logs.
  std::string summary() const;
  // Returns summary() without the position fields (max_seq_len, rope_theta, the rope scaling):
  // two configs with equal weight summaries hold interchangeable weights, and differ at most in
  // how far and with which RoPE frequencies they place positions, which is what continued
  // pretraining at a longer context (context extension) changes.
  std::string weights_summary() const;
  // Returns "" when the position fields equal `other`'s, else what changes from `other` to
  // this config ("max_seq_len 256 -> 1024, rope_theta 10000 -> 500000").
  std::string position_changes_from(const LlamaConfig& other) const;
};

}  // namespace anvil
