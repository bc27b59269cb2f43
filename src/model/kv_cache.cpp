// KV cache storage: one buffer holding keys and values of every layer.
#include "model/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace anvil {

KvCache::KvCache(const LlamaConfig& config, Backend& backend, int max_batch, int max_len)
    : max_batch_(max_batch), max_len_(max_len) {
  config.validate();
  ANVIL_CHECK(max_batch > 0 && max_len > 0,
              "[kv_cache] max_batch ({}) and max_len ({}) must be positive", max_batch, max_len);
  const Shape shape{max_batch, max_len, config.n_kv_heads, config.resolved_head_dim()};
  const size_t tensor_bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  buffer_ = Buffer(backend, 2 * tensor_bytes * config.n_layers, MemoryCategory::workspace);
  char* base = static_cast<char*>(buffer_.data());
  for (int l = 0; l < config.n_layers; ++l) {
    keys_.emplace_back(base + (2 * l) * tensor_bytes, DType::f32, shape, backend.device());
    values_.emplace_back(base + (2 * l + 1) * tensor_bytes, DType::f32, shape, backend.device());
  }
  const int64_t lse_floats = int64_t{max_len} * config.n_heads;
  scratch_ = Buffer(backend, static_cast<size_t>(lse_floats) * sizeof(float),
                    MemoryCategory::workspace);
  lse_scratch_ = scratch_.as(DType::f32, Shape{lse_floats});
}

void KvCache::reset() {
  length_ = 0;
  batch_ = 0;
  shared_rows_ = 0;
  shared_length_ = 0;
}

void KvCache::truncate(int length, int batch) {
  if (length == 0) {  // nothing kept: any batch may start
    reset();
    return;
  }
  const bool within_shared = length <= shared_length_ && batch <= shared_rows_;
  ANVIL_CHECK(length >= 0 && length <= length_ && batch >= 0 && (batch <= batch_ || within_shared),
              "[kv_cache] cannot keep {} positions of {} rows: {} positions of {} rows are cached",
              length, batch, length_, batch_);
  length_ = length;
  batch_ = batch;
}

void KvCache::share_prefix(Backend& backend, int rows) {
  ANVIL_CHECK(batch_ == 1 && length_ > 0 && rows >= 1 && rows <= max_batch_,
              "[kv_cache] share_prefix needs one cached row and 1..{} rows, got {} rows of {} "
              "positions for {} rows",
              max_batch_, batch_, length_, rows);
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (const Tensor* store : {&keys_[l], &values_[l]}) {
      const Tensor prefix = (*store)[0].slice(0, length_);
      for (int r = 1; r < rows; ++r) backend.copy((*store)[r].slice(0, length_), prefix);
    }
  }
  batch_ = rows;
  shared_rows_ = rows;
  shared_length_ = length_;
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
  // The new positions overwrite whatever a shared prefix held from length_ on.
  shared_length_ = std::min(shared_length_, length_);
  batch_ = batch;
  length_ += n;
}

}  // namespace anvil
