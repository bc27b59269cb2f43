// BackendRegistry: an ordered table of backend entries, unique by name.
#include "backend/registry.h"

#include "core/error.h"

namespace anvil {

void BackendRegistry::add(BackendEntry entry) {
  ANVIL_CHECK(!entry.name.empty() && entry.create && entry.describe,
              "[backend] a registry entry needs a name, a factory and a description");
  ANVIL_CHECK(find(entry.name) == nullptr, "[backend] backend '{}' is registered twice",
              entry.name);
  entries_.push_back(std::move(entry));
}

const BackendEntry* BackendRegistry::find(const std::string& name) const {
  for (const BackendEntry& entry : entries_)
    if (entry.name == name) return &entry;
  return nullptr;
}

std::vector<std::string> BackendRegistry::built_names() const {
  std::vector<std::string> names;
  for (const BackendEntry& entry : entries_)
    if (entry.built) names.push_back(entry.name);
  return names;
}

}  // namespace anvil
