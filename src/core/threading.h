// Thread count for all CPU parallelism (OpenMP). Resolved once at start-up from --threads,
// then ANVIL_NUM_THREADS, then the number of cores the process may run on.
#pragma once

#include <optional>

namespace anvil {

// Sets the OpenMP thread count from the flag or ANVIL_NUM_THREADS (default: all usable cores).
// Throws anvil::Error for a value below 1 or an unparsable variable.
int configure_threads(std::optional<int> flag);
// Returns the configured thread count.
int num_threads();
// Returns the number of cores this process may run on.
int available_cores();

}  // namespace anvil
