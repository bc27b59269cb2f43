// Fused (flash-style) attention of the CUDA backend. Three implementations share the semantics
// of Backend::attention_forward/backward (GQA, causal/window/sparse/sink/document masks,
// q_offset and k_offset, lse = -inf rows, dq/dk/dv overwritten); none materialises a (T x T)
// score matrix:
//   - CUDA-core kernels (attention_forward.cu, attention_backward.cu): f32 arithmetic on f32 or
//     bf16 tensors, any head dim up to 128; the fallback for everything;
//   - tensor-core kernels (attention_tc_*.cu): bf16 tensors, head dim 64 or 128, every mask;
//   - cuDNN's fused attention (cudnn_attention.h), for the masks it can express.
// attention_route.h picks one per call. The launchers below check nothing beyond sizes and
// queue work on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/backend.h"

namespace anvil {

// Flash-attention forward/backward on CUDA cores; semantics of Backend::attention_forward/backward.
void cuda_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const AttentionParams& params, cudaStream_t stream);
// Returns the f32 workspace bytes cuda_attention_backward needs for these shapes.
size_t cuda_attention_backward_workspace(const Tensor& q, const Tensor& k);
void cuda_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& out, const Tensor& lse,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const AttentionParams& params, void* workspace, cudaStream_t stream);

// Returns whether the tensor-core kernels take these tensors: all bf16, head dim (q's last
// dimension) 64 or 128, every data pointer on a 16-byte boundary. The gradient tensors are
// checked when given (backward).
bool tensor_core_attention_supports(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor* dout = nullptr,
                                    const Tensor* dq = nullptr, const Tensor* dk = nullptr,
                                    const Tensor* dv = nullptr);
// Flash-attention forward/backward on tensor cores (bf16 mma.sync, 64 x 64 tiles); same
// semantics; throws when tensor_core_attention_supports is false.
void cuda_attention_tc_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse,
                               const AttentionParams& params, cudaStream_t stream);
// Returns the workspace bytes cuda_attention_tc_backward needs (one f32 per query row and head).
size_t cuda_attention_tc_backward_workspace(const Tensor& q);
void cuda_attention_tc_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& out, const Tensor& lse,
                                const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                const AttentionParams& params, void* workspace,
                                cudaStream_t stream);

}  // namespace anvil
