// Device discovery for the CUDA backend: whether a usable GPU is present (and if not, the
// reason in one phrase), and the one-line description `anvil info` prints. The architecture
// list comes from the build (CMAKE_CUDA_ARCHITECTURES via ANVIL_CUDA_ARCHITECTURES).
#pragma once

#include <string>

namespace anvil::cuda {

// Returns "" when at least one CUDA device is usable, else "no CUDA device (<why>)".
std::string device_unavailable_reason();

// Returns "sm_90" for the CMake architecture list "90-real;90-virtual" (';' or ','
// separated; unique, in order, joined as "sm_80, sm_90").
std::string describe_architectures(const std::string& cmake_architectures);

// Returns the architectures this build targets, as describe_architectures formats them.
std::string built_architectures();

}  // namespace anvil::cuda
