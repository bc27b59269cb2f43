// KvCache: the keys and values (after RoPE) of every layer for the positions generated so far,
// so decoding a token attends to the cache instead of recomputing the prefix. Each batch row
// has its own (max_len, Hkv, D) f32 block per layer, so the first `length` positions of a row
// are one contiguous (1, length, Hkv, D) tensor for the attention op, which places the new
// queries after them (AttentionParams::q_offset). All rows share one length.
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
  // Keeps only the first `length` positions of the first `batch` rows, so sequences that share
  // that prefix continue from it without recomputing it. `batch` may exceed the current batch
  // up to the rows of a shared prefix (share_prefix) that `length` does not pass.
  void truncate(int length, int batch);
  // Copies row 0's cached positions into rows 1..rows-1 (rows <= max_batch) and makes the
  // batch `rows`: one prefilled prefix then serves `rows` different continuations.
  void share_prefix(Backend& backend, int rows);

  // Returns layer `layer`'s keys (max_batch, max_len, Hkv, D).
  Tensor keys(int layer) const { return keys_[layer]; }
  // Returns layer `layer`'s values (max_batch, max_len, Hkv, D).
  Tensor values(int layer) const { return values_[layer]; }
  // Returns max_len * Hq f32 of scratch for the attention op's lse of new queries.
  Tensor lse_scratch() const { return lse_scratch_; }
  // Checks that `n` more positions of `batch` rows fit (and that the batch did not change).
  void check_append(int batch, int n) const;
  // Records `n` positions of `batch` rows as cached once their keys and values are written.
  void commit_append(int batch, int n);

 private:
  int max_batch_;
  int max_len_;
  int length_ = 0;
  int batch_ = 0;
  // Rows 0..shared_rows_-1 all hold the same first shared_length_ positions (share_prefix).
  int shared_rows_ = 0;
  int shared_length_ = 0;
  Buffer buffer_;
  std::vector<Tensor> keys_;
  std::vector<Tensor> values_;
  Buffer scratch_;
  Tensor lse_scratch_;
};

}  // namespace anvil
