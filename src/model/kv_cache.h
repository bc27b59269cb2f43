// KvCache: the keys and values (after RoPE) of every layer for the positions generated so far,
// so decoding a token attends to the cache instead of recomputing the prefix. Each batch row
// has its own (max_len, Hkv, D) block per layer, so the first `length` positions of a row are
// one contiguous (1, length, Hkv, D) tensor for the attention op. All rows share one length.
// The attention op takes equal query and key lengths, so decoding places new queries at their
// positions in a zero-initialised (1, max_len, Hq, D) query window and runs causal attention
// over the whole window (extra attention work, never extra projections or MLPs).
#pragma once

#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/llama_config.h"

namespace anvil {

class KvCache {
 public:
  // Allocates room for max_batch rows of max_len positions on `backend`.
  KvCache(const LlamaConfig& config, Backend& backend, int max_batch, int max_len);

  int max_batch() const { return max_batch_; }
  int max_len() const { return max_len_; }
  // Returns the number of cached positions (the position of the next token).
  int length() const { return length_; }
  // Returns the batch size of the sequence being generated (0 before the first step).
  int batch() const { return batch_; }
  // Forgets every cached position so a new sequence can start.
  void reset();

  // Returns layer `layer`'s keys (max_batch, max_len, Hkv, D).
  Tensor keys(int layer) const { return keys_[layer]; }
  // Returns layer `layer`'s values (max_batch, max_len, Hkv, D).
  Tensor values(int layer) const { return values_[layer]; }
  // Returns the query window (1, max_len, Hq, D), its attention output and lse (1, Hq, max_len).
  Tensor query_window() const { return query_window_; }
  Tensor output_window() const { return output_window_; }
  Tensor lse_window() const { return lse_window_; }
  // Checks that `n` more positions of `batch` rows fit (and that the batch did not change).
  void check_append(int batch, int n) const;
  // Records `n` positions of `batch` rows as cached once their keys and values are written.
  void commit_append(int batch, int n);

 private:
  int max_batch_;
  int max_len_;
  int length_ = 0;
  int batch_ = 0;
  Buffer buffer_;
  std::vector<Tensor> keys_;
  std::vector<Tensor> values_;
  Buffer scratch_;
  Tensor query_window_;
  Tensor output_window_;
  Tensor lse_window_;
};

}  // namespace anvil
