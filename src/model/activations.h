// The activation memory of a LlamaModel, carved once from an Arena for (max_batch, max_seq).
// Buffers hold capacity for N = max_batch * max_seq rows; each step takes views of the first
// B * T rows with their real shapes (sized()), which stay contiguous because only the leading
// dimension shrinks. Saved activations are per layer, or one shared set when activation
// checkpointing (or inference) recomputes them; the backward scratch is shared by all layers.
// Dtypes: tensors marked "compute" below (GEMM inputs and outputs that feed GEMMs) have the
// model's compute dtype (f32 or bf16); the residual stream, norm statistics, lse, losses and
// the gradients flowing down the residual stream are always f32. The head's logits chunk is in
// the compute dtype: the lm-head GEMM writes it (f32 accumulation) and the fused classifier
// turns it into dlogits in place, so no f32 copy of bf16 logits exists; it shares its bytes
// with the layers' backward scratch (d_attn_out .. d_up), whose lives never meet it.
#pragma once

#include <cstdint>
#include <vector>

#include "model/arena.h"
#include "model/llama_config.h"

namespace anvil {

// The (B, T) of the current step.
struct StepDims {
  int batch = 0;
  int seq = 0;
  int64_t rows() const { return int64_t{batch} * seq; }
};

// What one layer's forward saves for its backward. Shapes as returned by sized().
struct LayerActivations {
  Tensor attn_norm_out;  // (N, C) compute: rmsnorm(x) * attn_norm
  Tensor attn_rstd;      // (N) f32
  Tensor q;              // (B, T, Hq, D) compute, after rope
  Tensor k;              // (B, T, Hkv, D) compute, after rope
  Tensor v;              // (B, T, Hkv, D) compute
  Tensor attn_out;       // (B, T, Hq, D) compute
  Tensor attn_lse;       // (B, Hq, T) f32
  Tensor resid_mid;      // (N, C) f32: x + o_proj(attn_out)
  Tensor mlp_norm_out;   // (N, C) compute
  Tensor mlp_rstd;       // (N) f32
  Tensor gate;           // (N, F) compute
  Tensor up;             // (N, F) compute
  Tensor swiglu_out;     // (N, F) compute: silu(gate) * up

  // Returns views of the first dims.rows() rows with the shapes documented above; under
  // sequence parallelism the (N, C) and (N) tensors hold only this rank's `local_rows` rows
  // (0: all of them).
  LayerActivations sized(const LlamaConfig& config, StepDims dims, int64_t local_rows = 0) const;
};

// Gradients of activations, overwritten layer after layer during backward.
struct BackwardScratch {
  Tensor d_residual;  // (N, C) f32 gradient of the residual stream flowing down the layers
  // (N, C) compute: d_residual in the compute dtype, the GEMM operand of the projections that
  // write the residual stream; the same view as d_residual for an f32 model.
  Tensor d_residual_compute;
  Tensor d_norm_out;  // (N, C) f32 gradient of an rmsnorm output
  Tensor d_attn_out;  // (B, T, Hq, D) compute
  Tensor dq;          // (B, T, Hq, D) compute
  Tensor dk;          // (B, T, Hkv, D) compute
  Tensor dv;          // (B, T, Hkv, D) compute
  Tensor d_swiglu;    // (N, F) compute
  Tensor d_gate;      // (N, F) compute
  Tensor d_up;        // (N, F) compute

  // Returns views of the first dims.rows() rows with the shapes documented above (d_residual:
  // `local_rows` rows under sequence parallelism; 0: all of them).
  BackwardScratch sized(const LlamaConfig& config, StepDims dims, int64_t local_rows = 0) const;
};

// Everything a LlamaModel computes into, carved from one arena.
struct ModelActivations {
  std::vector<Tensor> residual;  // n_layers + 1 of (N, C): embeddings, then each layer's output
  std::vector<LayerActivations> layers;  // n_layers sets, or 1 when recomputed
  BackwardScratch scratch;
  Tensor final_norm_out;  // (N, C) compute
  Tensor final_rstd;      // (N) f32
  Tensor logits;          // (logits_chunk_rows, V) compute: a chunk's logits, then its dlogits
  Tensor losses;          // (N) f32
  Tensor loss_sum;        // (2) u32: a pass's loss sum (a double) on the device
  Tensor tokens;          // (N) i32 device copy of the input ids
  Tensor targets;         // (N) i32
  Tensor loss_mask;       // (N) f32
  Tensor doc_ids;         // (N) i32
  Tensor positions;       // (N) i32
  Tensor ones;            // (N) compute, all ones: the operand of bias add and bias grad

  // Sequence parallelism only: (N, C) rows gathered from every tp rank, in the compute dtype
  // (the input of the column-parallel projections and of the head) and in f32 (partial
  // outputs of the row-parallel projections and the embedding before their reduce-scatter,
  // the gathered residual gradient); (N / tp, C) f32: a norm output's reduced gradient.
  Tensor sp_gathered;
  Tensor sp_full;
  Tensor sp_d_norm;
  Tensor sp_norm_grad;  // (C) f32: a norm weight's gradient from this rank's rows

  // Carves every tensor for `config` at capacity `max_rows` (B * T); `layer_sets` is the
  // number of saved-activation sets; `compute` is the compute dtype (f32 or bf16). With
  // `sequence_split` > 1 (sequence parallelism over that many tp ranks) the residual stream,
  // the norm outputs and statistics and the residual gradient hold max_rows / sequence_split
  // rows, and the sp_* buffers are carved.
  void carve(Arena& arena, const LlamaConfig& config, int max_batch, int64_t max_rows,
             int layer_sets, int64_t logits_chunk_rows, DType compute, int sequence_split = 1);
};

// Returns rows [0, rows) of a flat capacity tensor viewed as (rows, cols).
Tensor leading_rows(const Tensor& flat, int64_t rows, int64_t cols);

}  // namespace anvil
