// Shard configs and the element maps between a tensor-parallel shard and the full tensor.
#include "model/tensor_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace anvil {

LlamaConfig tp_shard_config(const LlamaConfig& config, int tp) {
  ANVIL_CHECK(tp >= 1, "[parallel] tp must be at least 1, got {}", tp);
  config.validate();
  if (tp == 1) return config;
  auto check = [&](int value, const char* what, const char* advice) {
    ANVIL_CHECK(value % tp == 0, "[parallel] tp {} does not divide {} ({}){}", tp, what, value,
                advice);
  };
  check(config.n_heads, "the attention heads (n_heads)", "");
  check(config.n_kv_heads, "the key/value heads (n_kv_heads)",
        "; anvil splits kv heads and does not replicate them, so tp may be at most n_kv_heads");
  check(config.ffn_dim, "the MLP width (ffn_dim)", "");
  check(config.vocab_size, "the vocabulary (vocab_size)",
        "; pad the vocabulary to a multiple of tp or choose another tp");
  LlamaConfig shard = config;
  shard.head_dim = config.resolved_head_dim();
  shard.n_heads = config.n_heads / tp;
  shard.n_kv_heads = config.n_kv_heads / tp;
  shard.ffn_dim = config.ffn_dim / tp;
  shard.vocab_size = config.vocab_size / tp;
  return shard;
}

Shape tp_shard_shape(const Shape& full, int split_dim, int size) {
  if (split_dim < 0 || size == 1) return full;
  ANVIL_CHECK(split_dim < full.rank() && full[split_dim] % size == 0,
              "[parallel] a tensor of shape {} cannot be cut into {} blocks on dimension {}",
              full.str(), size, split_dim);
  Shape shard = full;
  shard[split_dim] = full[split_dim] / size;
  return shard;
}

std::vector<TpRun> tp_runs(const Shape& full, int split_dim, int size, int rank) {
  const Shape shard = tp_shard_shape(full, split_dim, size);
  if (split_dim < 0 || size == 1) return {TpRun{0, 0, full.numel()}};
  if (split_dim == 0) return {TpRun{0, rank * shard.numel(), shard.numel()}};
  ANVIL_CHECK(full.rank() == 2, "[parallel] a split on dimension 1 needs a matrix, got {}",
              full.str());
  const int64_t rows = full[0], cols = full[1], width = shard[1];
  std::vector<TpRun> runs;
  runs.reserve(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    runs.push_back(TpRun{r * width, r * cols + rank * width, width});
  return runs;
}

std::vector<TpOverlap> tp_overlaps(const std::vector<TpRun>& a, const std::vector<TpRun>& b) {
  std::vector<TpOverlap> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].global, b[j].global);
    const int64_t hi = std::min(a[i].global + a[i].length, b[j].global + b[j].length);
    if (lo < hi) out.push_back(TpOverlap{a[i].local + (lo - a[i].global),
                                         b[j].local + (lo - b[j].global), hi - lo});
    if (a[i].global + a[i].length <= b[j].global + b[j].length) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

}  // namespace anvil
