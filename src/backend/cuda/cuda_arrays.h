// Conversions from Tensor to the CUDA launchers' typed arrays (Backend checks the arguments
// before a kernel sees them).
#pragma once

#include "backend/cuda/cuda_ops.h"
#include "core/tensor.h"

namespace anvil::cuda {

// Returns the tensor as a launcher's read-only array.
inline ConstArray in(const Tensor& t) { return ConstArray{t.data, t.dtype}; }
// Returns the tensor as a launcher's writable array.
inline MutableArray out(const Tensor& t) { return MutableArray{t.data, t.dtype}; }

}  // namespace anvil::cuda
