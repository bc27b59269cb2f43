// The throwing side of nccl_runtime.h, the reduction rule, and the build description.
#include "comm/nccl/nccl_runtime.h"

#include <fmt/format.h>

#include "comm/device_communicator.h"
#include "core/error.h"

namespace anvil::nccl {

void check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) [[likely]]
    return;
  throw_error(file, line, fmt::format("[nccl] {} failed at {}:{}: {} ({})", call, file, line,
                                      ncclGetErrorString(result), ncclGetLastError(nullptr)));
}

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) [[likely]]
    return;
  throw_error(file, line, fmt::format("[nccl] {} failed at {}:{}: {} ({})", call, file, line,
                                      cudaGetErrorString(status), cudaGetErrorName(status)));
}

bool runs_on_nccl(ReduceOp op, DType dtype) {
  return op == ReduceOp::sum &&
         (dtype == DType::f32 || dtype == DType::i32 || dtype == DType::u32);
}

ncclDataType_t datatype_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::i32: return ncclInt32;
    case DType::u32: return ncclUint32;
    default: break;
  }
  ANVIL_FAIL("[nccl] no NCCL reduction for dtype {}", dtype_name(dtype));
}

}  // namespace anvil::nccl

namespace anvil {

bool nccl_built() { return true; }

std::string nccl_description() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "nccl: built, library version unknown";
  return fmt::format("nccl: built, library {}.{}.{}", version / 10000, version / 100 % 100,
                     version % 100);
}

}  // namespace anvil
