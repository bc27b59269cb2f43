// The backend registry: names on the command line map to factories here.
#include "backend/backend.h"

#include "backend/registry.h"
#include "core/error.h"

namespace anvil {

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend(false);
  if (name == "cpu-ref") return make_cpu_backend(true);
  if (name == "cuda") return make_cuda_backend();
  ANVIL_FAIL("[backend] unknown backend '{}' (choose cpu, cpu-ref or cuda)", name);
}

std::vector<std::string> compiled_backends() {
  std::vector<std::string> names{"cpu", "cpu-ref"};
#ifdef ANVIL_HAVE_CUDA
  names.push_back("cuda");
#endif
  return names;
}

std::vector<std::string> describe_backends() {
  return {describe_cpu_backend(), describe_cuda_backend()};
}

}  // namespace anvil
