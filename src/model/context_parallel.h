// Context parallelism as the model sees it: each of the cp ranks of a group holds a slice of
// every sequence and attention runs as a ring. Layout (load-balanced for causal masks): a
// sequence of T positions is cut into 2 cp chunks of c = T / (2 cp) positions, and cp rank i
// holds chunk i in its local rows [0, c) and chunk 2cp-1-i in rows [c, 2c) of every sample.
// Every other op is row-wise, so the model computes on its T / cp local rows as usual; only
// RoPE (global positions of the rows), the document mask (ids of the whole sequence) and
// attention (keys and values of every chunk, exchanged around the ring) see the layout. The
// parallel layer provides the ring exchange over the cp communicator; without context
// parallelism (size 1) nothing here is called.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/batch.h"
#include "model/llama_config.h"

namespace anvil {

// A ring exchange in flight: wait() returns once every tensor of it is sent and received.
class RingExchange {
 public:
  virtual ~RingExchange() = default;
  virtual void wait() = 0;
  // Advances the transfer without blocking. Libraries without a progress thread (Open MPI's
  // default) move a large message only inside such calls, so the ring calls this between
  // blocks to keep the transfer running beside the compute.
  virtual void progress() {}
};

class ContextParallelOps {
 public:
  virtual ~ContextParallelOps() = default;
  // Starts sending each tensor of `send` to the next cp rank ((rank + 1) % size) and receiving
  // each tensor of `recv` (the same dtypes and sizes, in order) from the previous one, and
  // returns at once; the tensors must stay untouched until the exchange's wait() returns.
  virtual std::unique_ptr<RingExchange> ring_shift(std::span<const Tensor> send,
                                                   std::span<const Tensor> recv) = 0;
};

struct ContextParallel {
  int size = 1;
  int rank = 0;
  ContextParallelOps* ops = nullptr;  // required when size > 1; not owned
  bool enabled() const { return size > 1; }
  // Returns the chunk (of 2 size) that local half `half` (0 or 1) of the rows holds.
  int chunk_of_half(int half) const { return half == 0 ? rank : 2 * size - 1 - rank; }
};

// Throws "[parallel] ..." unless a sequence of `seq_len` positions splits into 2 cp chunks.
void check_cp_seq_len(int64_t seq_len, int cp);

// Returns the global position (within its sequence) of local row `local_t` of `local_seq`.
int64_t cp_global_position(const ContextParallel& cp, int64_t local_t, int64_t local_seq);

// Host storage and views of one rank's part of a batch (see cp_local_batch).
struct CpLocalBatch {
  std::vector<int32_t> tokens, targets;
  std::vector<float> loss_mask;
  Tensor tokens_view, targets_view, loss_mask_view;
};

// Returns this rank's rows of `full` (host tensors (B, T)): tokens, targets and loss mask
// (B, T / cp) in the layout above, held in `storage`; doc_ids stay the whole (B, T) ones.
Batch cp_local_batch(const ContextParallel& cp, const Batch& full, CpLocalBatch& storage);

// Returns whether any query of positions [q_begin, q_begin + length) may see any key of
// [k_begin, k_begin + length) under the causal, window and sink settings of `params`. Document
// ids and sparse patterns are not read: blocks they hide are computed (the backend skips
// their hidden tiles) and come out empty.
bool cp_block_may_be_visible(const AttentionParams& params, int64_t q_begin, int64_t k_begin,
                             int64_t length);

// Device buffers of the ring attention, allocated once for (max_batch, max local rows); the
// ring functions carve their views from them per call. kv and grad_kv are counted as
// communication (they travel the ring), the rest as workspace.
struct ContextParallelScratch {
  ContextParallelScratch() = default;
  ContextParallelScratch(Backend& backend, const LlamaConfig& shard_config, int cp,
                         int max_batch, int64_t max_local_seq, DType compute_dtype);
  // Bytes by category: the blocks that travel the ring (communication) and the rest
  // (workspace), as the constructor allocates them.
  struct Bytes {
    size_t communication = 0;
    size_t workspace = 0;
  };
  // Returns the bytes held.
  Bytes bytes() const;
  // Returns the bytes the constructor with these arguments allocates.
  static Bytes planned_bytes(const LlamaConfig& shard_config, int cp, int max_batch,
                             int64_t max_local_seq, DType compute_dtype);

  Buffer kv[2];          // key+value blocks arriving from the ring (compute dtype)
  Buffer grad_kv[2];     // the travelling dK+dV accumulators (f32)
  Buffer grad_kv_step;   // this step's contribution to the held block's dK+dV (f32)
  Buffer chunks;         // per-half staging: q, dout, out (2 each), k, v (compute dtype)
  Buffer partial;        // one block's out or dq, dk, dv (compute dtype)
  Buffer partial_f32;    // a partial out widened to f32 for the merge
  Buffer partial_lse;    // one block's lse (f32)
  Buffer accum;          // per local half: merged out (forward) or dq (backward), f32
  Buffer doc_ids;        // whole-sequence document ids copied to the device (i32)
};

// Ring attention over the cp ranks, the drop-in for Backend::attention_forward/backward on
// this rank's rows: q (B, T/cp, Hq, D), k and v (B, T/cp, Hkv, D) in the layout above; out
// (B, T/cp, Hq, D) =. lse (B, Hq, T/cp) f32 = holds the logsumexp of the whole sequence's keys
// chunk-major: (B, Hq, c) of local half 0, then of half 1 (only the backward below reads it).
// `params` carries the mask settings; doc_ids, when set, is (B, T) i32 for whole sequences.
// Collective over the cp ranks (same calls in the same order on each).
void cp_attention_forward(Backend& backend, const ContextParallel& cp,
                          ContextParallelScratch& scratch, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& out, const Tensor& lse,
                          const AttentionParams& params);
// dq (B, T/cp, Hq, D) =, dk and dv (B, T/cp, Hkv, D) = for this rank's rows, from the merged
// out and lse of cp_attention_forward. Collective over the cp ranks.
void cp_attention_backward(Backend& backend, const ContextParallel& cp,
                           ContextParallelScratch& scratch, const Tensor& dout, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                           const Tensor& dq, const Tensor& dk, const Tensor& dv,
                           const AttentionParams& params);

}  // namespace anvil
