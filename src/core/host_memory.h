// What the host's memory holds and what this process may still take of it, read from the
// kernel's own accounts: /proc/meminfo, the cgroup (v2 memory.max - memory.current, or v1
// memory.limit_in_bytes - memory.usage_in_bytes) and the address-space limit (RLIMIT_AS, as
// `ulimit -v` sets it, less the address space already mapped). Cheap: a few small files.
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

// Returns MemTotal of /proc/meminfo in bytes (0 when unreadable).
int64_t host_memory_total();

struct HostMemoryAvailable {
  int64_t bytes = 0;
  std::string limited_by;  // what set it: "MemAvailable", "cgroup memory.max", "RLIMIT_AS"
};

// Returns the lowest of what the kernel says this process can still allocate: MemAvailable,
// the cgroup's limit less its use, and RLIMIT_AS less the address space mapped now. A source
// that is absent or unlimited is left out; with none readable, bytes is 0 ("unknown").
HostMemoryAvailable host_memory_available();

}  // namespace anvil
