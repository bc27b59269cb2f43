// Device discovery and description (see cuda_device.h).
#include "backend/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "core/error.h"

#ifndef ANVIL_CUDA_ARCHITECTURES
#define ANVIL_CUDA_ARCHITECTURES "unknown"
#endif

namespace anvil::cuda {

std::string device_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return fmt::format("no CUDA device ({}: {})", cudaGetErrorName(status),
                       cudaGetErrorString(status));
  }
  if (count == 0) return "no CUDA device (cudaGetDeviceCount found none)";
  return "";
}

std::string describe_architectures(const std::string& cmake_architectures) {
  std::vector<std::string> seen;
  size_t start = 0;
  while (start <= cmake_architectures.size()) {
    size_t end = cmake_architectures.find_first_of(";,", start);
    if (end == std::string::npos) end = cmake_architectures.size();
    std::string item = cmake_architectures.substr(start, end - start);
    item = item.substr(0, item.find('-'));
    if (!item.empty()) {
      const std::string name = "sm_" + item;
      bool duplicate = false;
      for (const std::string& s : seen) duplicate = duplicate || s == name;
      if (!duplicate) seen.push_back(name);
    }
    start = end + 1;
  }
  std::string text;
  for (const std::string& s : seen) text += (text.empty() ? "" : ", ") + s;
  return text.empty() ? "unknown architectures" : text;
}

std::string built_architectures() { return describe_architectures(ANVIL_CUDA_ARCHITECTURES); }

}  // namespace anvil::cuda
