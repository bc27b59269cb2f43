// Which attention implementation serves a CUDA attention call (attention.h lists the three),
// and the per-backend object that runs it. The rule, per call:
//   cuDNN when it is loaded, the tensors are bf16 with a head dim it takes, and the mask is a
//   diagonal band (attention_band.h: causal, full, sliding window, key blocks placed by
//   offsets; documents, sinks under a window and sparse patterns are not bands);
//   else the tensor-core kernels when they take the tensors (bf16, head dim 64 or 128);
//   else the CUDA-core kernels.
// ANVIL_CUDA_ATTENTION (read at every call) overrides it: `cudnn` makes a missing cuDNN or a
// plan cuDNN cannot build an error for calls it could express, `tensor-core` skips cuDNN,
// `simt` uses the CUDA-core kernels only; unset or `auto` is the rule above. Without the
// override, a missing cuDNN is said once per process, and a plan cuDNN refuses once per shape.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "backend/attention_band.h"
#include "backend/backend.h"
#include "core/buffer.h"

namespace anvil::cuda {

enum class AttentionPath : int { cudnn = 0, tensor_core = 1, simt = 2 };
inline constexpr int kAttentionPaths = 3;
// Returns "cudnn", "tensor-core" or "simt".
const char* attention_path_name(AttentionPath path);

enum class AttentionPreference { automatic, cudnn, tensor_core, simt };
// Returns the preference `text` names (null or empty: automatic); throws Error naming the
// variable and the accepted values otherwise.
AttentionPreference parse_attention_preference(const char* text);

// What one call allows, decided on the host from its tensors and parameters.
struct AttentionCallTraits {
  std::optional<DiagonalBand> cudnn_band;  // set when cuDNN can express the call
  bool tensor_core = false;                // the tensor-core kernels take the tensors
};

// Returns the traits of a call (forward when the gradient tensors are null).
AttentionCallTraits attention_call_traits(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& out, const AttentionParams& params,
                                          const Tensor* dout = nullptr, const Tensor* dq = nullptr,
                                          const Tensor* dk = nullptr, const Tensor* dv = nullptr);

// Returns the path for a call. `cudnn_usable` says whether cuDNN is loaded; under the `cudnn`
// preference an expressible call gets cudnn regardless (the router then reports why not).
AttentionPath choose_attention_path(AttentionPreference preference,
                                    const AttentionCallTraits& traits, bool cudnn_usable);

// Returns how many attention calls (forward and backward) each path has served in this process.
uint64_t attention_calls_served(AttentionPath path);

class CudnnAttention;

// Runs CudaBackend's attention calls on the chosen path. Owns the cuDNN state (loaded on the
// first call that could use it) and one workspace that only grows: after warm-up no call
// allocates. Not thread-safe (one per backend, used from its stream's thread).
class AttentionRouter {
 public:
  // Takes workspace memory from `allocator` (the backend), which must outlive this object.
  explicit AttentionRouter(Allocator& allocator);
  ~AttentionRouter();
  AttentionRouter(const AttentionRouter&) = delete;
  AttentionRouter& operator=(const AttentionRouter&) = delete;

  void forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const Tensor& lse, const AttentionParams& params, cudaStream_t stream);
  void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, const AttentionParams& params, cudaStream_t stream);

 private:
  // Returns the cuDNN state, loading it on first use; null when cuDNN is unavailable (the
  // reason is then in cudnn_unavailable_).
  CudnnAttention* cudnn();
  // Returns at least `bytes` of device workspace (kept between calls).
  void* workspace(size_t bytes);
  // Decides the path of a call and whether cuDNN is to be tried.
  AttentionPath route(const AttentionCallTraits& traits);

  Allocator& allocator_;
  std::unique_ptr<CudnnAttention> cudnn_;
  bool cudnn_tried_ = false;
  std::string cudnn_unavailable_;
  Buffer workspace_;
};

}  // namespace anvil::cuda
