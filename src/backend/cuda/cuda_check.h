// Error checks for every CUDA runtime and cuBLASLt call of the CUDA backend. A failing call
// throws anvil::Error naming the call, the file:line that made it and the library's error
// string, e.g. "[cuda] cudaMalloc(&ptr, bytes) failed at allocator.cpp:40: out of memory
// (cudaErrorMemoryAllocation)". Host-only header: kernels report through check_launch().
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace anvil::cuda {

// Throws anvil::Error for a CUDA runtime status other than cudaSuccess.
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
// Throws anvil::Error for a cuBLAS status other than CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
// Throws when the last kernel launch failed (bad configuration, no kernel image for the GPU).
void check_launch(const char* kernel, const char* file, int line);

}  // namespace anvil::cuda

#define CUDA_CHECK(call) ::anvil::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::anvil::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH(kernel) ::anvil::cuda::check_launch(kernel, __FILE__, __LINE__)
