// The fixture of the CUDA tests that compare a GPU with the reference: a CudaBackend on
// device 0 beside cpu-ref, each with a DeviceTensors set. Skips with the reason when there is
// no device to run on.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "device_tensors.h"

namespace anvil::test {

class CudaReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = cuda::device_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    cuda_ = std::make_unique<CudaBackend>(0);
    cpu_ = make_backend("cpu-ref");
    gpu_ = std::make_unique<DeviceTensors>(*cuda_);
    host_ = std::make_unique<DeviceTensors>(*cpu_);
  }

  std::unique_ptr<CudaBackend> cuda_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<DeviceTensors> gpu_, host_;
};

}  // namespace anvil::test
