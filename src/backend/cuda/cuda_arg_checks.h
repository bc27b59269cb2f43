// Host-side argument checks of the CUDA backend's ops, with the CPU reference's wording
// ("[rmsnorm] weight has shape (5), expected (8)") so both backends fail alike, plus the
// conversions from Tensor to the launchers' typed pointers.
#pragma once

#include <initializer_list>

#include "backend/cuda/cuda_ops.h"
#include "core/tensor.h"

namespace anvil::cuda {

// Throws unless t lives on a CUDA device, has data (or no elements) and one of the dtypes.
void check_tensor(const Tensor& t, const char* op, const char* what,
                  std::initializer_list<DType> dtypes);
// Does check_tensor and also requires the exact shape.
void check_tensor(const Tensor& t, const char* op, const char* what,
                  std::initializer_list<DType> dtypes, const Shape& shape);
// Throws unless t has the given rank.
void check_rank(const Tensor& t, const char* op, const char* what, int rank);

inline constexpr std::initializer_list<DType> kActivationDtypes = {DType::f32, DType::bf16};
inline constexpr std::initializer_list<DType> kFloatDtypes = {DType::f32, DType::bf16,
                                                              DType::f16};

// Returns the tensor as a launcher's read-only array.
inline ConstArray in(const Tensor& t) { return ConstArray{t.data, t.dtype}; }
// Returns the tensor as a launcher's writable array.
inline MutableArray out(const Tensor& t) { return MutableArray{t.data, t.dtype}; }

}  // namespace anvil::cuda
