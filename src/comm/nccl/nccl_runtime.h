// NCCL and CUDA plumbing of the NCCL communicator: error checks that throw anvil::Error naming
// the call, file:line and the library's error string, the DType -> ncclDataType_t mapping, and
// the rule for which reductions NCCL runs itself. Only src/comm/nccl includes <nccl.h>.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/communicator.h"

#define NCCL_CHECK(call) ::anvil::nccl::check_nccl((call), #call, __FILE__, __LINE__)
#define NCCL_CUDA_CHECK(call) ::anvil::nccl::check_cuda((call), #call, __FILE__, __LINE__)

namespace anvil::nccl {

// Throws "[nccl] <call> failed at file:line: <ncclGetErrorString> (<last error>)".
void check_nccl(ncclResult_t result, const char* call, const char* file, int line);
// Throws "[nccl] <call> failed at file:line: <cudaGetErrorString> (<name>)".
void check_cuda(cudaError_t status, const char* call, const char* file, int line);

// Returns whether NCCL itself runs this reduction (plain sums of f32, i32 and u32). The rest
// (ordered_sum, max, 16-bit sums) move every rank's contribution with grouped send/recv and
// reduce it in rank order on the device (rank_order_reduce.h), so the bits match the host
// kernels of comm/reduce_kernels.h (the MPI communicator's) and do not depend on NCCL's
// algorithm.
bool runs_on_nccl(ReduceOp op, DType dtype);
// Returns NCCL's datatype for a dtype that runs_on_nccl accepts.
ncclDataType_t datatype_of(DType dtype);

}  // namespace anvil::nccl
