// GEMMs of the CUDA backend through cuBLASLt: f32 or bf16 operands, f32 accumulation and
// scaling (CUBLAS_COMPUTE_32F: no TF32, so f32 results match the CPU reference), C in bf16 or
// f32 for bf16 operands and f32 for f32 operands. Each distinct problem (sizes, transposes,
// batch strides, dtypes, pointer alignments) gets its descriptors and heuristic algorithm
// once; later calls reuse them. The workspace comes from the backend (counted as workspace).
#pragma once

#include <cublasLt.h>

#include <array>
#include <map>
#include <memory>

#include "core/buffer.h"
#include "core/tensor.h"

namespace anvil::cuda {

class CublasLtGemm {
 public:
  // Takes its workspace from `allocator` (the backend), which must outlive this object.
  explicit CublasLtGemm(Allocator& allocator);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Runs c = alpha * op(a) @ op(b) + beta * c on `stream` (shapes already checked; K > 0).
  void run(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
           bool transpose_b, float alpha, float beta, cudaStream_t stream);
  // Returns how many distinct GEMM problems have a cached plan.
  size_t cached_plans() const { return plans_.size(); }

 private:
  struct Plan;
  using PlanKey = std::array<int64_t, 14>;
  const Plan& plan_for(const PlanKey& key, const Tensor& a, const Tensor& b, const Tensor& c,
                       bool transpose_a, bool transpose_b);

  Allocator& allocator_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace anvil::cuda
