// Device kernels of the NCCL communicator's exact reductions: one row per rank in device
// memory (this rank's where it lies, the others' received into scratch) reduced element by
// element into `count` elements of `out`, bit for bit what comm/reduce_kernels.h computes on
// the host:
// sum_in_rank_order (one thread per element adds the rows in rank order; bf16/f16 through an
// f32 total rounded once; integers wrap; a NaN total is the canonical quiet NaN) and max_into
// applied to the rows in rank order (a NaN gives the canonical quiet NaN, +0 beats -0).
// They enqueue on `stream` and return; a launch error throws. No device code here, so host
// files include it as is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace anvil::nccl {

// The rows of a reduction in device memory: row own_rank at `own`, and the other ranks' rows
// in rank order at `received`, `stride` elements apart (row r at r < own_rank ? r : r - 1).
struct DeviceRows {
  const void* received = nullptr;  // ranks - 1 rows (unused on one rank)
  int64_t stride = 0;              // >= the reduced count
  const void* own = nullptr;
  int own_rank = 0;
  int ranks = 1;
};

// out[i] = row 0[i] + row 1[i] + ... + row ranks-1[i], i < count. `out` may be the own row.
void launch_sum_in_rank_order(const DeviceRows& rows, int64_t count, DType dtype, void* out,
                              cudaStream_t stream);
// out[i] = the max over the rows of row r[i], i < count. `out` may be the own row.
void launch_max_of_rows(const DeviceRows& rows, int64_t count, DType dtype, void* out,
                        cudaStream_t stream);

}  // namespace anvil::nccl
