// Helpers of the NCCL communicator's tests: the reason to skip without a CUDA device, and a
// device copy of a host vector.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/tensor.h"

namespace anvil {

// Returns "" when a CUDA device is usable, else the reason to skip.
inline std::string no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

#define SKIP_WITHOUT_DEVICE()                                        \
  do {                                                               \
    const std::string skip_reason = no_device_reason();              \
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;           \
  } while (0)

// Device copy of a host vector; freed on destruction.
template <typename T>
struct DeviceVector {
  T* data = nullptr;
  int64_t count = 0;
  explicit DeviceVector(const std::vector<T>& host) : count(static_cast<int64_t>(host.size())) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceVector() { cudaFree(data); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  Tensor tensor(DType dtype) const {
    return Tensor(data, dtype, Shape{count}, Device{DeviceType::cuda, 0});
  }
  std::vector<T> read() const {
    std::vector<T> host(static_cast<size_t>(count));
    EXPECT_EQ(cudaMemcpy(host.data(), data, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
};

}  // namespace anvil
