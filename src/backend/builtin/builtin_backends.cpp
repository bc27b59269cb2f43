// The process-wide backend registry and the functions the rest of anvil calls (make_backend,
// compiled_backends, describe_backends). Each backend library contributes one registration
// function, called here explicitly. Self-registering static objects would need no list, but
// the backends are static libraries: the linker drops an object file nothing references, and
// its registrar with it, unless every consumer links with --whole-archive. One explicit line
// per backend library is the simpler contract (docs/porting.md, "Registering the backend").
#include "backend/registry.h"

#include "core/error.h"

namespace anvil {

const BackendRegistry& backend_registry() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    register_cpu_backends(r);
    register_sim_backend(r);
    register_cuda_backend(r);  // the no_cuda stub registers an unbuilt entry
    return r;
  }();
  return registry;
}

std::string backend_choices() {
  const std::vector<std::string> names = backend_registry().built_names();
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
    text += names[i];
  }
  return text;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  const BackendEntry* entry = backend_registry().find(name);
  ANVIL_CHECK(entry != nullptr, "[backend] unknown backend '{}' (choose {})", name,
              backend_choices());
  return entry->create();
}

int64_t free_device_memory(const Backend& backend) {
  const BackendEntry* entry = backend_registry().find(backend.name());
  if (entry == nullptr || !entry->free_memory) return -1;
  return entry->free_memory(backend);
}

std::vector<std::string> compiled_backends() { return backend_registry().built_names(); }

std::vector<std::string> describe_backends() {
  std::vector<std::string> lines;
  for (const BackendEntry& entry : backend_registry().entries()) lines.push_back(entry.describe());
  return lines;
}

}  // namespace anvil
