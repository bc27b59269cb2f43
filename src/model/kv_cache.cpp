// KV cache storage: one buffer holding keys and values of every layer.
#include "model/kv_cache.h"

#include "core/error.h"

namespace anvil {

KvCache::KvCache(const LlamaConfig& config, Backend& backend, int max_batch, int max_len)
    : max_batch_(max_batch), max_len_(max_len) {
  config.validate();
  ANVIL_CHECK(max_batch > 0 && max_len > 0,
              "[kv_cache] max_batch ({}) and max_len ({}) must be positive", max_batch, max_len);
  const Shape shape{max_batch, max_len, config.n_kv_heads, config.resolved_head_dim()};
  const size_t tensor_bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  buffer_ = Buffer(backend, 2 * tensor_bytes * config.n_layers);
  char* base = static_cast<char*>(buffer_.data());
  for (int l = 0; l < config.n_layers; ++l) {
    keys_.emplace_back(base + (2 * l) * tensor_bytes, DType::f32, shape, backend.device());
    values_.emplace_back(base + (2 * l + 1) * tensor_bytes, DType::f32, shape, backend.device());
  }
  const int64_t lse_floats = int64_t{max_len} * config.n_heads;
  scratch_ = Buffer(backend, static_cast<size_t>(lse_floats) * sizeof(float));
  lse_scratch_ = scratch_.as(DType::f32, Shape{lse_floats});
}

void KvCache::reset() {
  length_ = 0;
  batch_ = 0;
}

void KvCache::check_append(int batch, int n) const {
  ANVIL_CHECK(batch >= 1 && batch <= max_batch_, "[kv_cache] batch {} outside 1..{}", batch,
              max_batch_);
  ANVIL_CHECK(batch_ == 0 || batch == batch_,
              "[kv_cache] batch changed from {} to {} mid-sequence; reset() the cache first",
              batch_, batch);
  ANVIL_CHECK(n >= 1 && length_ + n <= max_len_,
              "[kv_cache] {} new positions after {} cached exceed the capacity of {}", n, length_,
              max_len_);
}

void KvCache::commit_append(int batch, int n) {
  check_append(batch, n);
  batch_ = batch;
  length_ += n;
}

}  // namespace anvil
