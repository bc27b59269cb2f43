// Argument checks of the CUDA backend (see cuda_arg_checks.h): the shared backend checks with
// the CUDA device type.
#include "backend/cuda/cuda_arg_checks.h"

#include "backend/tensor_checks.h"

namespace anvil::cuda {

void check_tensor(const Tensor& t, const char* op, const char* what,
                  std::initializer_list<DType> dtypes) {
  check_op_tensor(t, DeviceType::cuda, "CUDA", op, what, dtypes);
}

void check_tensor(const Tensor& t, const char* op, const char* what,
                  std::initializer_list<DType> dtypes, const Shape& shape) {
  check_op_tensor(t, DeviceType::cuda, "CUDA", op, what, dtypes, shape);
}

void check_rank(const Tensor& t, const char* op, const char* what, int rank) {
  check_op_rank(t, op, what, rank);
}

}  // namespace anvil::cuda
