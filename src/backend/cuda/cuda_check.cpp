// The throwing side of cuda_check.h. Messages carry the call text, the caller's file:line
// (also recorded in the Error) and both the library's name and description of the status.
#include "backend/cuda/cuda_check.h"

#include <string>

#include "core/error.h"

namespace anvil::cuda {
namespace {

std::string short_file(const char* file) {
  const std::string path(file);
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) [[likely]]
    return;
  throw_error(file, line, fmt::format("[cuda] {} failed at {}:{}: {} ({})", call,
                                      short_file(file), line, cudaGetErrorString(status),
                                      cudaGetErrorName(status)));
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  throw_error(file, line, fmt::format("[cuda] {} failed at {}:{}: {} ({})", call,
                                      short_file(file), line, cublasLtGetStatusString(status),
                                      cublasLtGetStatusName(status)));
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) [[likely]]
    return;
  throw_error(file, line, fmt::format("[cuda] kernel {} failed to launch at {}:{}: {} ({})",
                                      kernel, short_file(file), line, cudaGetErrorString(status),
                                      cudaGetErrorName(status)));
}

}  // namespace anvil::cuda
