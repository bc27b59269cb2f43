// CublasLtGemm (see cublaslt_gemm.h). The row-major -> column-major mapping is gemm_layout.h's;
// this file owns the cuBLASLt descriptors, the heuristic query and the plan cache.
#include "backend/cuda/cublaslt_gemm.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_layout.h"
#include "core/error.h"

namespace anvil::cuda {
namespace {

// Hopper's recommended cuBLASLt workspace.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType_t cuda_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  ANVIL_FAIL("[matmul] cuBLASLt path takes f32 or bf16, got {}", dtype_name(dtype));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return layout;
}

}  // namespace

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

CublasLtGemm::CublasLtGemm(Allocator& allocator) : allocator_(allocator) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (workspace_) allocator_.deallocate(workspace_, workspace_bytes_, MemoryCategory::workspace);
  if (handle_) cublasLtDestroy(handle_);
}

const CublasLtGemm::Plan& CublasLtGemm::plan_for(const PlanKey& key, const Tensor& a,
                                                 const Tensor& b, const Tensor& c,
                                                 bool transpose_a, bool transpose_b) {
  const auto found = plans_.find(key);
  if (found != plans_.end()) return *found->second;

  const GemmLayout layout = plan_gemm_layout(a.shape, b.shape, transpose_a, transpose_b);
  auto plan = std::make_unique<Plan>();
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_first = layout.transpose_first ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = layout.transpose_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                              &op_first, sizeof(op_first)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                              &op_second, sizeof(op_second)));
  const cudaDataType_t in_type = cuda_dtype(a.dtype);
  plan->first = make_layout(in_type, layout.first_rows, layout.first_cols, layout.first_ld,
                            layout.batch, layout.first_stride);
  plan->second = make_layout(in_type, layout.second_rows, layout.second_cols, layout.second_ld,
                             layout.batch, layout.second_stride);
  plan->c = make_layout(cuda_dtype(c.dtype), layout.c_rows, layout.c_cols, layout.c_ld,
                        layout.batch, layout.c_stride);

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t align_first = static_cast<uint32_t>(pointer_alignment(b.data));
  const uint32_t align_second = static_cast<uint32_t>(pointer_alignment(a.data));
  const uint32_t align_c = static_cast<uint32_t>(pointer_alignment(c.data));
  cublasLtMatmulHeuristicResult_t result{};
  int found_algos = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first, sizeof(uint32_t));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second, sizeof(uint32_t));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(uint32_t));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(uint32_t));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->first, plan->second,
                                            plan->c, plan->c, preference, 1, &result,
                                            &found_algos);
  cublasLtMatmulPreferenceDestroy(preference);
  CUBLAS_CHECK(status);
  ANVIL_CHECK(found_algos > 0,
              "[matmul] cuBLASLt has no algorithm for a {} x {} x {} GEMM (batch {}, a {}, c {})",
              layout.n, layout.m, layout.k, layout.batch, dtype_name(a.dtype),
              dtype_name(c.dtype));
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void CublasLtGemm::run(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                       bool transpose_b, float alpha, float beta, cudaStream_t stream) {
  if (!workspace_) {
    workspace_ = allocator_.allocate(kWorkspaceBytes, MemoryCategory::workspace);
    workspace_bytes_ = kWorkspaceBytes;
  }
  const PlanKey key = {a.shape.rank(),
                       a.shape.rank() == 3 ? a.shape[0] : 1,
                       a.shape.back(1),
                       a.shape.back(0),
                       b.shape.rank(),
                       b.shape.back(1),
                       b.shape.back(0),
                       transpose_a,
                       transpose_b,
                       static_cast<int64_t>(a.dtype),
                       static_cast<int64_t>(c.dtype),
                       pointer_alignment(a.data),
                       pointer_alignment(b.data),
                       pointer_alignment(c.data)};
  const Plan& plan = plan_for(key, a, b, c, transpose_a, transpose_b);
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, b.data, plan.first, a.data,
                              plan.second, &beta, c.data, plan.c, c.data, plan.c, &plan.algo,
                              workspace_, workspace_bytes_, stream));
}

}  // namespace anvil::cuda
