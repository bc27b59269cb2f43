// Device discovery and the `anvil info` line, which must be right on machines without a GPU
// (the CI builders) as well as with one.
#include "backend/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backend/backend.h"
#include "backend/registry.h"
#include "core/error.h"

namespace anvil::cuda {
namespace {

TEST(CudaDevice, DescribesCMakeArchitectureLists) {
  EXPECT_EQ(describe_architectures("90-real;90-virtual"), "sm_90");
  EXPECT_EQ(describe_architectures("90-real,90-virtual"), "sm_90");
  EXPECT_EQ(describe_architectures("80;90a-real"), "sm_80, sm_90a");
  EXPECT_EQ(describe_architectures(""), "unknown architectures");
}

TEST(CudaDevice, ThisBuildTargetsHopper) { EXPECT_EQ(built_architectures(), "sm_90"); }

TEST(CudaDevice, InfoLineSaysWhatWasBuiltAndWhatIsPresent) {
  const std::string line = describe_cuda_backend();
  EXPECT_EQ(line.rfind("cuda: built for sm_90, ", 0), 0u) << line;
  const std::string reason = device_unavailable_reason();
  if (reason.empty()) {
    EXPECT_NE(line.find("device 0 of"), std::string::npos) << line;
  } else {
    EXPECT_EQ(reason.rfind("no CUDA device (", 0), 0u) << reason;
    EXPECT_NE(line.find(reason), std::string::npos) << line;
  }
}

TEST(CudaDevice, CudaIsACompiledBackendThatExplainsAMissingDevice) {
  const std::vector<std::string> names = compiled_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
  const std::string reason = device_unavailable_reason();
  if (!reason.empty()) {
    try {
      make_backend("cuda");
      FAIL() << "creating the cuda backend without a device must throw";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "[cuda] " + reason);
    }
  } else {
    EXPECT_EQ(make_backend("cuda")->name(), "cuda");
  }
}

}  // namespace
}  // namespace anvil::cuda
