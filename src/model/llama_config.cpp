// LlamaConfig validation and the derived counts (parameters, FLOPs) used by the layout, the
// planner and the MFU report. The counts are sums over the parameter table, the rows the layout
// is built from, so they agree with it by construction.
#include "model/llama_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "core/error.h"
#include "model/parameter_table.h"

namespace anvil {

void LlamaConfig::validate() const {
  ANVIL_CHECK(dim > 0, "[config] dim must be positive, got {}", dim);
  ANVIL_CHECK(n_layers > 0, "[config] n_layers must be positive, got {}", n_layers);
  ANVIL_CHECK(n_heads > 0, "[config] n_heads must be positive, got {}", n_heads);
  ANVIL_CHECK(n_kv_heads > 0, "[config] n_kv_heads must be positive, got {}", n_kv_heads);
  ANVIL_CHECK(n_heads % n_kv_heads == 0,
              "[config] n_heads ({}) must be a multiple of n_kv_heads ({}) for grouped-query "
              "attention",
              n_heads, n_kv_heads);
  ANVIL_CHECK(head_dim >= 0, "[config] head_dim must be positive or 0 (= dim / n_heads), got {}",
              head_dim);
  ANVIL_CHECK(head_dim > 0 || dim % n_heads == 0,
              "[config] dim ({}) is not divisible by n_heads ({}); set head_dim explicitly", dim,
              n_heads);
  ANVIL_CHECK(resolved_head_dim() % 2 == 0,
              "[config] head_dim must be even for rotary embeddings, got {}", resolved_head_dim());
  ANVIL_CHECK(ffn_dim > 0, "[config] ffn_dim must be positive, got {}", ffn_dim);
  ANVIL_CHECK(vocab_size > 0, "[config] vocab_size must be positive, got {}", vocab_size);
  ANVIL_CHECK(max_seq_len > 0, "[config] max_seq_len must be positive, got {}", max_seq_len);
  ANVIL_CHECK(rope_theta > 0.0f, "[config] rope_theta must be positive, got {}", rope_theta);
  ANVIL_CHECK(norm_eps > 0.0f, "[config] norm_eps must be positive, got {}", norm_eps);
  ANVIL_CHECK(rope_scaling_factor == 0.0f || rope_scaling_factor >= 1.0f,
              "[config] rope_scaling_factor must be 0 (off) or >= 1, got {}", rope_scaling_factor);
  if (rope_scaling_factor > 0.0f) {
    ANVIL_CHECK(rope_low_freq_factor > 0.0f && rope_low_freq_factor < rope_high_freq_factor,
                "[config] llama3 rope scaling needs 0 < low_freq_factor ({}) < high_freq_factor "
                "({})",
                rope_low_freq_factor, rope_high_freq_factor);
    ANVIL_CHECK(rope_original_max_position > 0,
                "[config] rope original_max_position_embeddings must be positive, got {}",
                rope_original_max_position);
  }
}

RopeParams LlamaConfig::rope_params() const {
  RopeParams params;
  params.theta = rope_theta;
  params.scaling_factor = rope_scaling_factor;
  params.low_freq_factor = rope_low_freq_factor;
  params.high_freq_factor = rope_high_freq_factor;
  params.original_max_position = rope_original_max_position;
  return params;
}

namespace {

// Returns the elements of a row's tensors summed over the model (once per layer when per layer).
int64_t row_elements(const ParamRow& row, const LlamaConfig& config) {
  const int64_t copies = row.scope == ParamScope::layer ? config.n_layers : 1;
  return copies * param_shape(row, config).numel();
}

}  // namespace

int64_t LlamaConfig::matmul_param_count() const {
  // Every matrix multiplies except the embedding table, whose lookup is not a matmul, unless
  // the tied head multiplies by it.
  int64_t total = 0;
  for (const ParamRow* row : llama_param_rows(*this)) {
    const bool matrix = row->shape[1] != Extent::none;
    if (matrix && (row->role != ParamRole::embedding || tie_embeddings))
      total += row_elements(*row, *this);
  }
  return total;
}

int64_t LlamaConfig::param_count() const {
  int64_t total = 0;
  for (const ParamRow* row : llama_param_rows(*this)) total += row_elements(*row, *this);
  return total;
}

double LlamaConfig::flops_per_token(int seq_len, double attention_fraction) const {
  const double attention = 12.0 * n_layers * seq_len * q_dim() * attention_fraction;
  return 6.0 * static_cast<double>(matmul_param_count()) + attention;
}

std::string LlamaConfig::summary() const {
  return fmt::format(
      "dim={} layers={} heads={}/{} head_dim={} ffn={} vocab={} max_seq={} rope_theta={}{}{}{} "
      "params={}",
      dim, n_layers, n_heads, n_kv_heads, resolved_head_dim(), ffn_dim, vocab_size, max_seq_len,
      rope_theta,
      rope_scaling_factor > 0 ? fmt::format(" rope_scaling={}", rope_scaling_factor)
                              : std::string(),
      tie_embeddings ? " tied" : "", attention_bias ? " qkv_bias" : "", param_count());
}

std::string LlamaConfig::weights_summary() const {
  return fmt::format("dim={} layers={} heads={}/{} head_dim={} ffn={} vocab={}{}{} params={}", dim,
                     n_layers, n_heads, n_kv_heads, resolved_head_dim(), ffn_dim, vocab_size,
                     tie_embeddings ? " tied" : "", attention_bias ? " qkv_bias" : "",
                     param_count());
}

std::string LlamaConfig::position_changes_from(const LlamaConfig& other) const {
  std::vector<std::string> changes;
  auto note = [&](const char* name, auto before, auto after) {
    if (before != after) changes.push_back(fmt::format("{} {} -> {}", name, before, after));
  };
  note("max_seq_len", other.max_seq_len, max_seq_len);
  note("rope_theta", other.rope_theta, rope_theta);
  note("rope_scaling_factor", other.rope_scaling_factor, rope_scaling_factor);
  // The other scaling keys only matter while scaling is on (on either side).
  if (rope_scaling_factor > 0 || other.rope_scaling_factor > 0) {
    note("rope_low_freq_factor", other.rope_low_freq_factor, rope_low_freq_factor);
    note("rope_high_freq_factor", other.rope_high_freq_factor, rope_high_freq_factor);
    note("rope_original_max_position", other.rope_original_max_position,
         rope_original_max_position);
  }
  return fmt::format("{}", fmt::join(changes, ", "));
}

}  // namespace anvil
