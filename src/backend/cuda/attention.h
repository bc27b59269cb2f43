// Fused (flash-style) attention kernels of the CUDA backend, implemented in attention*.cu.
// CudaBackend::attention_forward/backward check nothing beyond device placement and call these
// on the backend's stream; the kernels own all shape checks and must honour every convention of
// Backend::attention_forward/backward (GQA, causal/window/doc masks, q_offset, lse = -inf rows,
// dq/dk/dv overwritten). No (T x T) score matrix may be materialised.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/backend.h"

namespace anvil {

// Flash-attention forward/backward on `stream`; semantics of Backend::attention_forward/backward.
void cuda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const AttentionParams& params, cudaStream_t stream);
// Returns the f32 workspace bytes cuda_attention_backward needs for these shapes.
size_t cuda_attention_backward_workspace(const Tensor& q, const Tensor& k);
void cuda_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& out, const Tensor& lse,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const AttentionParams& params, void* workspace, cudaStream_t stream);

}  // namespace anvil
