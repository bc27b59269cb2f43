// Communicators for device (GPU) tensors. With NCCL found at configure time the NCCL
// communicator in src/comm/nccl is built; otherwise src/comm/no_nccl says why there is none.
// Host code only: CUDA types cross this header as void* so CPU-only layers can include it.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace anvil {

class Backend;

// Returns the communicator the parallel layer moves `backend`'s tensors with, over the ranks of
// `bootstrap` (collective over it): null where device memory is host memory (cpu: `bootstrap`
// itself moves them), NCCL on cuda (on the backend's stream; throws naming the missing piece
// in a build without NCCL), and a stream communicator (comm/stream_communicator.h: the host
// library on the device memory, on a communication stream) for every other backend (sim).
// Never a copy through host staging. `backend` must outlive the result.
std::unique_ptr<Communicator> make_device_communicator(Communicator& bootstrap, Backend& backend);

// Returns an NCCL communicator with the ranks of `bootstrap`, moving tensors that live on CUDA
// device `device`. Collective over `bootstrap`: rank 0 creates NCCL's unique id and broadcasts
// it through `bootstrap` (MPI_Bcast when it is the MPI world). Every collective first waits,
// on the device, for the work already queued on `producer_stream` (a cudaStream_t; null means
// the legacy default stream), so tensors written by the backend are complete when sent.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device,
                                                     void* producer_stream = nullptr);
// Returns whether this build has the NCCL communicator.
bool nccl_built();
// Returns a one-line description of NCCL support for `anvil info`.
std::string nccl_description();

}  // namespace anvil
