// The attention router (attention_route.h) and the tensor-core kernels' host-side support check.
#include "backend/cuda/attention_route.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "backend/cuda/attention.h"
#include "backend/cuda/cudnn_attention.h"
#include "core/error.h"
#include "core/log.h"

namespace anvil {

namespace {

constexpr uintptr_t kVectorBytes = 16;

bool bf16_on_vector_boundary(const Tensor* t) {
  return t == nullptr ||
         (t->dtype == DType::bf16 && reinterpret_cast<uintptr_t>(t->data) % kVectorBytes == 0);
}

// Returns whether every given tensor is bf16 on a 16-byte boundary.
bool all_bf16_aligned(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                      const Tensor* dout, const Tensor* dq, const Tensor* dk, const Tensor* dv) {
  for (const Tensor* t : {&q, &k, &v, &out, dout, dq, dk, dv})
    if (!bf16_on_vector_boundary(t)) return false;
  return true;
}

}  // namespace

bool tensor_core_attention_supports(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor* dout, const Tensor* dq,
                                    const Tensor* dk, const Tensor* dv) {
  if (q.shape.rank() != 4) return false;
  const int64_t D = q.shape[3];
  return (D == 64 || D == 128) && all_bf16_aligned(q, k, v, out, dout, dq, dk, dv);
}

}  // namespace anvil

namespace anvil::cuda {
namespace {

std::atomic<uint64_t> calls_served[kAttentionPaths];

void count_call(AttentionPath path) { calls_served[static_cast<int>(path)].fetch_add(1); }

struct Route {
  AttentionPath path;
  AttentionPreference preference;
};

}  // namespace

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::cudnn: return "cudnn";
    case AttentionPath::tensor_core: return "tensor-core";
    case AttentionPath::simt: return "simt";
  }
  return "unknown";
}

AttentionPreference parse_attention_preference(const char* text) {
  if (text == nullptr || text[0] == '\0' || std::strcmp(text, "auto") == 0)
    return AttentionPreference::automatic;
  if (std::strcmp(text, "cudnn") == 0) return AttentionPreference::cudnn;
  if (std::strcmp(text, "tensor-core") == 0) return AttentionPreference::tensor_core;
  if (std::strcmp(text, "simt") == 0) return AttentionPreference::simt;
  ANVIL_FAIL("[cuda] ANVIL_CUDA_ATTENTION must be auto, cudnn, tensor-core or simt, got '{}'",
             text);
}

AttentionCallTraits attention_call_traits(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& out, const AttentionParams& params,
                                          const Tensor* dout, const Tensor* dq, const Tensor* dk,
                                          const Tensor* dv) {
  AttentionCallTraits traits;
  traits.tensor_core = tensor_core_attention_supports(q, k, v, out, dout, dq, dk, dv);
  const int64_t B = q.shape[0], Tq = q.shape[1], Hq = q.shape[2], D = q.shape[3];
  const int64_t Tk = k.shape[1];
  // cuDNN's SDPA takes head dims that are multiples of 8 (anvil asks it for <= 128 only).
  const bool tensors = B > 0 && Hq > 0 && D % 8 == 0 && D <= 128 &&
                       all_bf16_aligned(q, k, v, out, dout, dq, dk, dv);
  if (!tensors) return traits;
  std::optional<DiagonalBand> band = diagonal_band_for(Tq, Tk, params);
  if (band && band->left && Tq > Tk) band.reset();  // cuDNN: a left bound needs s_q <= s_kv
  traits.cudnn_band = band;
  return traits;
}

AttentionPath choose_attention_path(AttentionPreference preference,
                                    const AttentionCallTraits& traits, bool cudnn_usable) {
  const AttentionPath ours = traits.tensor_core ? AttentionPath::tensor_core : AttentionPath::simt;
  switch (preference) {
    case AttentionPreference::simt: return AttentionPath::simt;
    case AttentionPreference::tensor_core: return ours;
    case AttentionPreference::cudnn:
      return traits.cudnn_band ? AttentionPath::cudnn : ours;
    case AttentionPreference::automatic:
      return traits.cudnn_band && cudnn_usable ? AttentionPath::cudnn : ours;
  }
  return ours;
}

uint64_t attention_calls_served(AttentionPath path) {
  return calls_served[static_cast<int>(path)].load();
}

AttentionRouter::AttentionRouter(Allocator& allocator) : allocator_(allocator) {}

AttentionRouter::~AttentionRouter() = default;

CudnnAttention* AttentionRouter::cudnn() {
  if (!cudnn_tried_) {
    cudnn_tried_ = true;
    try {
      cudnn_ = std::make_unique<CudnnAttention>();
    } catch (const Error& e) {
      cudnn_unavailable_ = e.what();
      static std::once_flag said;
      std::call_once(said, [&] {
        log_warn("cuDNN attention unavailable ({}); attention runs on anvil's CUDA kernels",
                 cudnn_unavailable_);
      });
    }
  }
  return cudnn_.get();
}

void* AttentionRouter::workspace(size_t bytes) {
  if (workspace_.bytes() < bytes) {
    workspace_.reset();  // the stream orders its reuse after the work that used it
    workspace_ = Buffer(allocator_, bytes, MemoryCategory::workspace);
  }
  return workspace_.data();
}

AttentionPath AttentionRouter::route(const AttentionCallTraits& traits) {
  const AttentionPreference preference =
      parse_attention_preference(std::getenv("ANVIL_CUDA_ATTENTION"));
  bool usable = false;
  if (traits.cudnn_band && (preference == AttentionPreference::automatic ||
                            preference == AttentionPreference::cudnn))
    usable = cudnn() != nullptr;
  const AttentionPath path = choose_attention_path(preference, traits, usable);
  ANVIL_CHECK(path != AttentionPath::cudnn || usable,
              "[cuda] ANVIL_CUDA_ATTENTION=cudnn but cuDNN is unavailable: {}",
              cudnn_unavailable_);
  return path;
}

namespace {

// Handles cuDNN declining a problem: an error under ANVIL_CUDA_ATTENTION=cudnn, else one
// warning per distinct problem and the caller's fallback.
void report_refusal(const std::string& refusal) {
  const AttentionPreference preference =
      parse_attention_preference(std::getenv("ANVIL_CUDA_ATTENTION"));
  ANVIL_CHECK(preference != AttentionPreference::cudnn,
              "[cuda] ANVIL_CUDA_ATTENTION=cudnn but cuDNN has no plan: {}", refusal);
  static std::mutex mutex;
  static std::set<std::string> reported;
  const std::lock_guard<std::mutex> lock(mutex);
  if (reported.insert(refusal).second)
    log_warn("cuDNN has no plan for {}; this attention runs on anvil's CUDA kernels", refusal);
}

}  // namespace

void AttentionRouter::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const AttentionParams& params,
                              cudaStream_t stream) {
  const AttentionCallTraits traits = attention_call_traits(q, k, v, out, params);
  AttentionPath path = route(traits);
  if (path == AttentionPath::cudnn) {
    std::string refusal;
    if (cudnn_->forward(q, k, v, out, lse, params, *traits.cudnn_band,
                        [this](size_t bytes) { return workspace(bytes); }, stream, &refusal)) {
      count_call(path);
      return;
    }
    report_refusal(refusal);
    path = traits.tensor_core ? AttentionPath::tensor_core : AttentionPath::simt;
  }
  if (path == AttentionPath::tensor_core) {
    cuda_attention_tc_forward(q, k, v, out, lse, params, stream);
  } else {
    cuda_attention_forward(q, k, v, out, lse, params, stream);
  }
  count_call(path);
}

void AttentionRouter::backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const AttentionParams& params, cudaStream_t stream) {
  const AttentionCallTraits traits =
      attention_call_traits(q, k, v, out, params, &dout, &dq, &dk, &dv);
  AttentionPath path = route(traits);
  if (path == AttentionPath::cudnn) {
    std::string refusal;
    if (cudnn_->backward(dout, q, k, v, out, lse, dq, dk, dv, params, *traits.cudnn_band,
                         [this](size_t bytes) { return workspace(bytes); }, stream, &refusal)) {
      count_call(path);
      return;
    }
    report_refusal(refusal);
    path = traits.tensor_core ? AttentionPath::tensor_core : AttentionPath::simt;
  }
  if (path == AttentionPath::tensor_core) {
    cuda_attention_tc_backward(dout, q, k, v, out, lse, dq, dk, dv, params,
                               workspace(cuda_attention_tc_backward_workspace(q)), stream);
  } else {
    cuda_attention_backward(dout, q, k, v, out, lse, dq, dk, dv, params,
                            workspace(cuda_attention_backward_workspace(q, k)), stream);
  }
  count_call(path);
}

}  // namespace anvil::cuda
