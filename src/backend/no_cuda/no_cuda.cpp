// Stub used when anvil is built without the CUDA backend: it reports "not built" and refuses
// to create a backend, so CPU-only builds link and say clearly why --backend cuda fails.
#include "backend/registry.h"

#include "core/error.h"

namespace anvil {

std::unique_ptr<Backend> make_cuda_backend() {
  ANVIL_FAIL("[cuda] this anvil was built without the CUDA backend (nvcc or its sources were "
             "not found at configure time)");
}

std::string describe_cuda_backend() { return "cuda: not built"; }

void register_cuda_backend(BackendRegistry& registry) {
  registry.add({"cuda", describe_cuda_backend, make_cuda_backend, /*built=*/false});
}

}  // namespace anvil
