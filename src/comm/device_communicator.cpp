// make_device_communicator (see device_communicator.h).
#include "comm/device_communicator.h"

#include "backend/backend.h"
#include "comm/stream_communicator.h"
#include "core/error.h"

namespace anvil {

std::unique_ptr<Communicator> make_device_communicator(Communicator& bootstrap, Backend& backend) {
  const Device device = backend.device();
  if (device.is_cpu()) return nullptr;
  if (device.type == DeviceType::cuda) {
    ANVIL_CHECK(nccl_built(), "[comm] --backend cuda moves tensors between ranks with NCCL: {}",
                nccl_description());
    return make_nccl_communicator(bootstrap, device.index, backend.native_stream());
  }
  return make_stream_communicator(bootstrap, backend);
}

}  // namespace anvil
