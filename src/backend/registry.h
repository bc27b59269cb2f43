// The backend registry: every backend library adds {name, description, factory} entries to a
// BackendRegistry through its own register_<name>_backend function, and the process-wide
// registry (backend/builtin) calls those functions in a fixed order. Nothing above the
// backend layer names a backend: --backend, `anvil info` and make_backend read this table.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace anvil {

struct BackendEntry {
  std::string name;  // what --backend takes: "cpu", "sim", "cuda"
  // Returns the line `anvil info` prints, e.g. "cuda: built for sm_90, device 0 of 8: ...".
  std::function<std::string()> describe;
  // Creates an instance; throws a clear error when the hardware is absent.
  std::function<std::unique_ptr<Backend>()> create;
  // False for a stub entry of a backend this binary was built without: make_backend then
  // throws the stub's reason, and the name is not offered as a choice.
  bool built = true;
  // Returns the bytes of device memory an instance made by `create` still has free for this
  // process; null where the device's memory is the host's (cpu, cpu-ref). The pre-flight
  // memory check of a run reads it (free_device_memory).
  std::function<int64_t(const Backend&)> free_memory;
};

class BackendRegistry {
 public:
  // Adds an entry; throws when the name is already registered.
  void add(BackendEntry entry);
  // Returns the entry named `name`, or null.
  const BackendEntry* find(const std::string& name) const;
  // Returns the names of the built entries in registration order.
  std::vector<std::string> built_names() const;
  const std::vector<BackendEntry>& entries() const { return entries_; }

 private:
  std::vector<BackendEntry> entries_;
};

// Returns the registry of every backend library linked into this binary.
const BackendRegistry& backend_registry();
// Returns the built backend names as prose for help texts and errors: "cpu, cpu-ref or sim".
std::string backend_choices();
// Returns the bytes of device memory `backend` still has free for this process, or -1 where
// its device's memory is the host's (BackendEntry::free_memory).
int64_t free_device_memory(const Backend& backend);

// The registration function of each backend library (one per library; see
// backend/builtin/builtin_backends.cpp for why these are explicit calls).
void register_cpu_backends(BackendRegistry& registry);
void register_sim_backend(BackendRegistry& registry);
void register_cuda_backend(BackendRegistry& registry);

// Factories and descriptions the registrations wrap, callable directly by tests.
// Creates the CPU backend; reference = true selects the plain reference loops.
std::unique_ptr<Backend> make_cpu_backend(bool reference);
std::string describe_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend();
std::string describe_cuda_backend();

}  // namespace anvil
