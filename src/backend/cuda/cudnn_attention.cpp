// CudnnAttention (cudnn_attention.h). With ANVIL_HAVE_CUDNN_FRONTEND the frontend's graph API
// builds and runs the SDPA graphs; the frontend runs in its dynamic-loading mode, in which every
// cuDNN call goes through cudnn_frontend::cudnn_dlhandle, set here from load_cudnn_library()
// before the first frontend call. The frontend reports failures as error objects and, in some
// places, exceptions: both become a refusal (no plan) or an Error (execution).
// Without the frontend the class only says why it is not there.
#include "backend/cuda/cudnn_attention.h"

#include "core/error.h"

#if defined(ANVIL_HAVE_CUDNN_FRONTEND)

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <array>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "backend/cuda/cudnn_library.h"

namespace cudnn_frontend {
// The frontend's handle to libcudnn in dynamic-loading mode (declared by cudnn_frontend_shim.h).
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace anvil::cuda {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the graphs' inputs and outputs (the variant pack's keys).
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv };

// A problem: direction, shapes, band bounds (-1: none; both are >= 0 when set), scale bits.
using PlanKey = std::array<int64_t, 11>;

// An int64 list of the frontend's dim/stride type.
using Dims = std::vector<int64_t>;

// cuDNN dims (b, h, s, d) and strides of an anvil (B, T, H, D) tensor.
Dims dims_of(int64_t B, int64_t T, int64_t H, int64_t D) { return {B, H, T, D}; }
Dims strides_of(int64_t T, int64_t H, int64_t D) { return {T * H * D, D, H * D, 1}; }

PlanKey plan_key(bool backward, const Tensor& q, const Tensor& k, const DiagonalBand& band,
                 float scale) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
  return PlanKey{backward ? 1 : 0, q.shape[0],         q.shape[1],         k.shape[1],
                 q.shape[2],       k.shape[2],         q.shape[3],         band.right.value_or(-1),
                 band.left.value_or(-1), static_cast<int64_t>(scale_bits), 0};
}

std::string describe(const PlanKey& key) {
  std::string text = fmt::format(
      "attention{} B={} Tq={} Tk={} Hq={} Hkv={} D={} bf16", key[0] ? " backward" : "", key[1],
      key[2], key[3], key[4], key[5], key[6]);
  if (key[7] >= 0) text += fmt::format(" right bound {}", key[7]);
  if (key[8] >= 0) text += fmt::format(" left bound {}", key[8]);
  return text;
}

float resolved_scale(const AttentionParams& params, int64_t D) {
  return params.scale != 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(D));
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name,
                                                    Uid uid, Dims dims, Dims strides) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(std::move(dims))
                          .set_stride(std::move(strides)));
}

// The Stats / lse tensor: (b, h, s, 1) f32 with anvil's (B, Hq, Tq) layout.
Dims stats_dims(int64_t B, int64_t Hq, int64_t Tq) { return {B, Hq, Tq, 1}; }
Dims stats_strides(int64_t Hq, int64_t Tq) { return {Hq * Tq, Tq, 1, 1}; }

template <typename Options>
void apply_band(Options& options, const DiagonalBand& band) {
  if (band.right) {
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
    options.set_diagonal_band_right_bound(static_cast<int>(*band.right));
  }
  if (band.left) options.set_diagonal_band_left_bound(static_cast<int>(*band.left));
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Graph> forward_graph(const PlanKey& key, const DiagonalBand& band,
                                                float scale) {
  const int64_t B = key[1], Tq = key[2], Tk = key[3], Hq = key[4], Hkv = key[5], D = key[6];
  auto graph = new_graph();
  auto q = input(*graph, "Q", kQ, dims_of(B, Tq, Hq, D), strides_of(Tq, Hq, D));
  auto k = input(*graph, "K", kK, dims_of(B, Tk, Hkv, D), strides_of(Tk, Hkv, D));
  auto v = input(*graph, "V", kV, dims_of(B, Tk, Hkv, D), strides_of(Tk, Hkv, D));
  auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(
      scale);
  apply_band(options, band);
  auto [o, stats] = graph->sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(dims_of(B, Tq, Hq, D)).set_stride(strides_of(Tq, Hq, D));
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(stats_dims(B, Hq, Tq))
      .set_stride(stats_strides(Hq, Tq));
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const PlanKey& key, const DiagonalBand& band,
                                                 float scale, bool deterministic) {
  const int64_t B = key[1], Tq = key[2], Tk = key[3], Hq = key[4], Hkv = key[5], D = key[6];
  auto graph = new_graph();
  auto q = input(*graph, "Q", kQ, dims_of(B, Tq, Hq, D), strides_of(Tq, Hq, D));
  auto k = input(*graph, "K", kK, dims_of(B, Tk, Hkv, D), strides_of(Tk, Hkv, D));
  auto v = input(*graph, "V", kV, dims_of(B, Tk, Hkv, D), strides_of(Tk, Hkv, D));
  auto o = input(*graph, "O", kO, dims_of(B, Tq, Hq, D), strides_of(Tq, Hq, D));
  auto dout = input(*graph, "dO", kDout, dims_of(B, Tq, Hq, D), strides_of(Tq, Hq, D));
  auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                 .set_name("Stats")
                                 .set_uid(kStats)
                                 .set_dim(stats_dims(B, Hq, Tq))
                                 .set_stride(stats_strides(Hq, Tq))
                                 .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("sdpa_backward")
                     .set_attn_scale(scale)
                     .set_deterministic_algorithm(deterministic);
  apply_band(options, band);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
  dq->set_output(true).set_uid(kDq).set_dim(dims_of(B, Tq, Hq, D)).set_stride(strides_of(Tq, Hq, D));
  dk->set_output(true).set_uid(kDk).set_dim(dims_of(B, Tk, Hkv, D)).set_stride(strides_of(Tk, Hkv, D));
  dv->set_output(true).set_uid(kDv).set_dim(dims_of(B, Tk, Hkv, D)).set_stride(strides_of(Tk, Hkv, D));
  return graph;
}

}  // namespace

struct CudnnAttention::State {
  std::string description;
  cudnnHandle_t handle = nullptr;
  struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused the problem
    int64_t workspace_bytes = 0;
    std::string refusal;
  };
  std::map<PlanKey, Plan> plans;

  // Returns the plan of `key`, building it on first use with `build` (which returns a graph
  // ready for build()).
  template <typename MakeGraph>
  const Plan& plan(const PlanKey& key, MakeGraph make_graph) {
    const auto found = plans.find(key);
    if (found != plans.end()) return found->second;
    Plan plan;
    try {
      std::shared_ptr<fe::graph::Graph> graph = make_graph();
      auto status = graph->build(handle, {fe::HeurMode_t::A});
      if (status.is_good()) status = graph->get_workspace_size(plan.workspace_bytes);
      if (status.is_good()) {
        plan.graph = std::move(graph);
      } else {
        plan.refusal = status.get_message();
      }
    } catch (const std::exception& e) {
      plan.refusal = e.what();
    }
    if (!plan.graph) plan.refusal = describe(key) + ": " + plan.refusal;
    return plans.emplace(key, std::move(plan)).first->second;
  }

  // Runs a built plan with the given tensors on `stream`; throws on failure.
  void run(const Plan& plan, const PlanKey& key, std::unordered_map<int64_t, void*>& pack,
           const WorkspaceSource& workspace, cudaStream_t stream) {
    void* scratch = workspace(static_cast<size_t>(plan.workspace_bytes));
    const cudnnStatus_t set = fe::detail::set_stream(handle, stream);
    ANVIL_CHECK(set == CUDNN_STATUS_SUCCESS, "[cuda] cudnnSetStream failed: {}",
                fe::detail::get_error_string(set));
    auto status = plan.graph->execute(handle, pack, scratch);
    ANVIL_CHECK(status.is_good(), "[cuda] cuDNN {} failed: {}", describe(key),
                status.get_message());
  }
};

CudnnAttention::CudnnAttention() : state_(std::make_unique<State>()) {
  const CudnnLibrary& library = load_cudnn_library();
  ANVIL_CHECK(library.handle != nullptr, "[cuda] {}", library.error);
  cudnn_frontend::cudnn_dlhandle = library.handle;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  try {
    status = fe::detail::create_handle(&state_->handle);
  } catch (const std::exception& e) {
    ANVIL_FAIL("[cuda] cuDNN from {} is incomplete: {}", library.location, e.what());
  }
  ANVIL_CHECK(status == CUDNN_STATUS_SUCCESS, "[cuda] cudnnCreate failed ({} from {}): {}",
              library.version, library.location, fe::detail::get_error_string(status));
  state_->description = fmt::format("cuDNN {} from {}, frontend {}.{}.{}", library.version,
                                    library.location, CUDNN_FRONTEND_MAJOR_VERSION,
                                    CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
}

CudnnAttention::~CudnnAttention() {
  if (!state_ || state_->handle == nullptr) return;
  state_->plans.clear();
  fe::detail::destroy_handle(state_->handle);
}

std::string CudnnAttention::description() const { return state_->description; }

size_t CudnnAttention::cached_plans() const {
  size_t built = 0;
  for (const auto& [key, plan] : state_->plans) built += plan.graph != nullptr;
  return built;
}

bool CudnnAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionParams& params,
                             const DiagonalBand& band, const WorkspaceSource& workspace,
                             cudaStream_t stream, std::string* refusal) {
  const float scale = resolved_scale(params, q.shape[3]);
  const PlanKey key = plan_key(false, q, k, band, scale);
  const State::Plan& plan = state_->plan(key, [&] { return forward_graph(key, band, scale); });
  if (!plan.graph) {
    *refusal = plan.refusal;
    return false;
  }
  std::unordered_map<int64_t, void*> pack = {
      {kQ, q.data}, {kK, k.data}, {kV, v.data}, {kO, out.data}, {kStats, lse.data}};
  state_->run(plan, key, pack, workspace, stream);
  return true;
}

bool CudnnAttention::backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& out, const Tensor& lse,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const AttentionParams& params, const DiagonalBand& band,
                              const WorkspaceSource& workspace, cudaStream_t stream,
                              std::string* refusal) {
  const float scale = resolved_scale(params, q.shape[3]);
  PlanKey key = plan_key(true, q, k, band, scale);
  // The deterministic algorithm first (no atomics in dQ: run-to-run identical gradients), then
  // cuDNN's default where it has no deterministic plan.
  key[10] = 1;
  const State::Plan* plan =
      &state_->plan(key, [&] { return backward_graph(key, band, scale, true); });
  if (!plan->graph) {
    key[10] = 0;
    plan = &state_->plan(key, [&] { return backward_graph(key, band, scale, false); });
  }
  if (!plan->graph) {
    *refusal = plan->refusal;
    return false;
  }
  std::unordered_map<int64_t, void*> pack = {
      {kQ, q.data},       {kK, k.data},   {kV, v.data},   {kO, out.data}, {kStats, lse.data},
      {kDout, dout.data}, {kDq, dq.data}, {kDk, dk.data}, {kDv, dv.data}};
  state_->run(*plan, key, pack, workspace, stream);
  return true;
}

}  // namespace anvil::cuda

#else  // !ANVIL_HAVE_CUDNN_FRONTEND

namespace anvil::cuda {

struct CudnnAttention::State {};

CudnnAttention::CudnnAttention() {
  ANVIL_FAIL(
      "[cuda] cuDNN attention was not built: the cuDNN frontend headers were not found at "
      "configure time (scripts/install-deps.sh installs them)");
}

CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::description() const { return "cuDNN attention not built"; }

size_t CudnnAttention::cached_plans() const { return 0; }

bool CudnnAttention::forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const AttentionParams&, const DiagonalBand&,
                             const WorkspaceSource&, cudaStream_t, std::string* refusal) {
  *refusal = "cuDNN attention not built";
  return false;
}

bool CudnnAttention::backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const AttentionParams&, const DiagonalBand&,
                              const WorkspaceSource&, cudaStream_t, std::string* refusal) {
  *refusal = "cuDNN attention not built";
  return false;
}

}  // namespace anvil::cuda

#endif  // ANVIL_HAVE_CUDNN_FRONTEND
