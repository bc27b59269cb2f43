// Argument checks of the CUDA backend (see cuda_arg_checks.h).
#include "backend/cuda/cuda_arg_checks.h"

#include <string>

#include "core/error.h"

namespace anvil::cuda {

void check_tensor(const Tensor& t, const char* op, const char* what,
                  std::initializer_list<DType> dtypes) {
  ANVIL_CHECK(t.device.type == DeviceType::cuda,
              "[{}] {} lives on the host; the CUDA backend takes device tensors only", op, what);
  ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[{}] {} has no data", op, what);
  bool allowed = false;
  std::string choices;
  for (DType d : dtypes) {
    allowed = allowed || d == t.dtype;
    choices += (choices.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  ANVIL_CHECK(allowed, "[{}] {} has dtype {}, expected {}", op, what, dtype_name(t.dtype),
              choices);
}

void check_tensor(const Tensor& t, const char* op, const char* what,
                  std::initializer_list<DType> dtypes, const Shape& shape) {
  check_tensor(t, op, what, dtypes);
  ANVIL_CHECK(t.shape == shape, "[{}] {} has shape {}, expected {}", op, what, t.shape.str(),
              shape.str());
}

void check_rank(const Tensor& t, const char* op, const char* what, int rank) {
  ANVIL_CHECK(t.shape.rank() == rank, "[{}] {} must have rank {}, got shape {}", op, what, rank,
              t.shape.str());
}

}  // namespace anvil::cuda
