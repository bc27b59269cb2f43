// Tensor parallelism as the model sees it: the tp rank, the tp group's size and the two
// collectives a Megatron-style block needs. The model stays single-device code: it computes
// with its shard's shapes (tp_shard_config) and calls these collectives at the points where a
// split matmul's partial results meet (after the row-parallel o and down projections in
// forward, after the column-parallel q/k/v and gate/up input gradients in backward, around the
// vocabulary-parallel embedding and head). The parallel layer implements them over the tp
// communicator; without tensor parallelism they are never called.
// Parameters are cut by ParameterInfo::split_dim into equal contiguous blocks, block t on tp
// rank t; tp_runs maps a shard's elements to the full tensor's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/llama_config.h"

namespace anvil {

class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  // In place: every tp rank ends with the sum of all tp ranks' `t`, bitwise identical on every
  // rank (so replicated values computed from it stay identical without further exchange).
  virtual void all_reduce(const Tensor& t) = 0;
  // out (n * size) = every tp rank's in (n), in rank order.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // out (n) = the sum over tp ranks of slice [rank * n, (rank + 1) * n) of in (n * size),
  // bitwise identical to all_reduce's sum of that slice.
  virtual void reduce_scatter(const Tensor& in, const Tensor& out) = 0;
};

struct TensorParallel {
  int size = 1;
  int rank = 0;
  TensorParallelOps* ops = nullptr;  // required when size > 1; not owned
  // Sequence parallelism: between the column- and row-parallel matmuls (the residual stream,
  // the norms and their outputs) each tp rank holds only rows [rank * N/tp, (rank+1) * N/tp)
  // of the N = batch x seq rows; an all-gather before q/k/v, gate/up and the head and a
  // reduce-scatter after o_proj, down_proj and the embedding replace the all-reduces.
  bool sequence_parallel = false;
  bool enabled() const { return size > 1; }
  bool splits_sequence() const { return size > 1 && sequence_parallel; }
};

// Returns the config of one tp rank's shard: n_heads, n_kv_heads, ffn_dim and vocab_size
// divided by tp, head_dim made explicit. Throws "[parallel] ..." naming the sizes when one of
// them is not divisible (kv heads are never replicated: tp must divide n_kv_heads).
LlamaConfig tp_shard_config(const LlamaConfig& config, int tp);

// A contiguous run of elements: shard elements [local, local + length) of a parameter are the
// full tensor's elements [global, global + length) (row-major offsets within the parameter).
struct TpRun {
  int64_t local = 0;
  int64_t global = 0;
  int64_t length = 0;
};

// Returns the runs of tp rank `rank`'s shard of a tensor of full shape `full` cut on
// `split_dim` (-1: whole) over `size` ranks, in increasing local (and global) order: one run
// for a split on dimension 0 or for a whole tensor, one per row for a split on dimension 1.
std::vector<TpRun> tp_runs(const Shape& full, int split_dim, int size, int rank);

// Returns the shard shape of a tensor of full shape `full`.
Shape tp_shard_shape(const Shape& full, int split_dim, int size);

// The overlap of two shards' runs of the same tensor: element `a` of shard A is element `b`
// of shard B for `length` consecutive elements.
struct TpOverlap {
  int64_t a = 0;
  int64_t b = 0;
  int64_t length = 0;
};

// Returns where two run lists (each in increasing global order) cover the same elements of
// the full tensor, in increasing order.
std::vector<TpOverlap> tp_overlaps(const std::vector<TpRun>& a, const std::vector<TpRun>& b);

}  // namespace anvil
