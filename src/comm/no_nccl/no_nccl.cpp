// Builds without NCCL (no CUDA toolkit, or no libnccl at configure time): asking for a device
// communicator fails with one line that says how to get one.
#include "comm/device_communicator.h"
#include "core/error.h"

namespace anvil {

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int, void*) {
  ANVIL_FAIL("[nccl] this anvil was built without NCCL; configure with the CUDA toolkit and "
             "libnccl installed to train on several GPUs");
}

bool nccl_built() { return false; }

std::string nccl_description() { return "nccl: not built"; }

}  // namespace anvil
