// cuDNN's fused attention (SDPA) through the cuDNN frontend's graph API, forward and backward,
// for bf16 tensors whose mask is a diagonal band (attention_band.h). The frontend is header-only
// and runs in its dynamic-loading mode: libcudnn.so.9 is opened at run time (cudnn_library.h),
// never linked. Graphs are built once per problem (shapes, band, scale, direction) and cached,
// like the cuBLASLt plans; a problem cuDNN has no plan for is remembered too, so it is asked
// once. cuDNN's Stats output is the natural-log logsumexp of the scaled scores per query row,
// exactly Backend's lse (B, Hq, Tq), so it is written in place and read back by the backward.
// Layouts: anvil's (B, T, H, D) rows are cuDNN's (b, h, s, d) dims with strides
// (T H D, D, H D, 1). The backward asks for cuDNN's deterministic algorithm first.
// Without the frontend headers at build time this file builds a stub that reports so.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "backend/attention_band.h"
#include "backend/backend.h"

namespace anvil::cuda {

// Device workspace of at least the given bytes, valid until the next request.
using WorkspaceSource = std::function<void*(size_t bytes)>;

class CudnnAttention {
 public:
  // Loads cuDNN and creates a handle on the current device; throws Error with the reason
  // (not built with the frontend, library not found, no device) when it cannot.
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Returns e.g. "cuDNN 91900 from /usr/local/cuda/lib64/libcudnn.so.9, frontend 1.32.0".
  std::string description() const;

  // Runs the forward (out, lse) on `stream`. Returns false, with the reason in `refusal`, when
  // cuDNN has no plan for this problem (nothing was queued then); throws on execution errors.
  bool forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, const AttentionParams& params, const DiagonalBand& band,
               const WorkspaceSource& workspace, cudaStream_t stream, std::string* refusal);
  // Runs the backward (dq, dk, dv overwritten); same contract.
  bool backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, const AttentionParams& params, const DiagonalBand& band,
                const WorkspaceSource& workspace, cudaStream_t stream, std::string* refusal);

  // Returns how many problems have a built plan.
  size_t cached_plans() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace anvil::cuda
