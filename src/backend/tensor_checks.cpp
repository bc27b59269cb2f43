// The shared op argument checks (see tensor_checks.h).
#include "backend/tensor_checks.h"

#include <fmt/format.h>

#include <string>

#include "core/error.h"

namespace anvil {

namespace {

std::string device_name(const Device& d) {
  return d.type == DeviceType::cpu ? std::string("the host") : fmt::format("cuda:{}", d.index);
}

}  // namespace

void check_op_tensor(const Tensor& t, DeviceType device, const char* backend, const char* op,
                     const char* what, std::initializer_list<DType> dtypes) {
  ANVIL_CHECK(t.device.type == device, "[{}] {} lives on {}; the {} backend takes {} tensors only",
              op, what, device_name(t.device), backend,
              device == DeviceType::cpu ? "host" : "device");
  ANVIL_CHECK(t.data != nullptr || t.numel() == 0, "[{}] {} has no data", op, what);
  for (DType d : dtypes) {
    if (d == t.dtype) return;
  }
  // Only a failing check builds the list: ops run this on every call of a training step.
  std::string choices;
  for (DType d : dtypes) choices += (choices.empty() ? "" : " or ") + std::string(dtype_name(d));
  ANVIL_FAIL("[{}] {} has dtype {}, expected {}", op, what, dtype_name(t.dtype), choices);
}

void check_op_tensor(const Tensor& t, DeviceType device, const char* backend, const char* op,
                     const char* what, std::initializer_list<DType> dtypes, const Shape& shape) {
  check_op_tensor(t, device, backend, op, what, dtypes);
  ANVIL_CHECK(t.shape == shape, "[{}] {} has shape {}, expected {}", op, what, t.shape.str(),
              shape.str());
}

void check_op_rank(const Tensor& t, const char* op, const char* what, int rank) {
  ANVIL_CHECK(t.shape.rank() == rank, "[{}] {} must have rank {}, got shape {}", op, what, rank,
              t.shape.str());
}

}  // namespace anvil
