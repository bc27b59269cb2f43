// Small exact collectives on host values, built from all_gather (which moves bytes): every
// rank receives every rank's values and combines them itself in a fixed order, so 64-bit
// integers and doubles (which the Communicator has no dtype for) travel bit for bit. Over a
// world of one they return at once, without calling the communicator.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/memory_counters.h"

namespace anvil {

// Returns every rank's `values` (all ranks pass the same count), concatenated in rank order.
std::vector<uint64_t> all_gather_words(Communicator& comm, std::span<const uint64_t> values);
std::vector<int64_t> all_gather_int64s(Communicator& comm, std::span<const int64_t> values);
std::vector<double> all_gather_doubles(Communicator& comm, std::span<const double> values);

// Returns every rank's memory snapshot, in rank order.
std::vector<MemorySnapshot> all_gather_memory(Communicator& comm, const MemorySnapshot& mine);

// Returns the sum of one integer over all ranks (exact).
int64_t all_ranks_sum(Communicator& comm, int64_t value);

// Copies root's `text` into every rank's `text`.
void broadcast_string(Communicator& comm, std::string& text, int root);

}  // namespace anvil
