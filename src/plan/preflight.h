// The pre-flight memory check of `anvil train`, `anvil finetune` and `anvil launch`: before a
// run loads or allocates anything large, its plan (make_plan: the engine's own sizing
// functions, the same ones it allocates from) is compared with what each rank has free: the
// device's free memory on a device backend (free_device_memory of backend/registry.h: sim's
// arena, cuda's cudaMemGetInfo), on the cpu backends the host's (host_memory_available: MemAvailable, the
// cgroup's limit, RLIMIT_AS) shared by the ranks of the host; with offload on a device backend
// the host must hold the plan's host figures too. preflight.margin of the free memory stays
// unused. A run that does not fit is refused (preflight.mode = check) with the predicted peak,
// what is free, the largest category and the settings that would fit (fit_suggestions, tried
// against the same free memory), or warned about (warn); off skips the check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/host_memory.h"
#include "plan/plan.h"
#include "train/config.h"

namespace anvil {

// What one rank may allocate.
struct RankMemory {
  int64_t device_free = -1;  // bytes; -1: the device's memory is the host's
  std::string device_name;   // the backend ("sim", "cuda")
  HostMemoryAvailable host;  // this rank's share of the host's free memory
  int host_ranks = 1;        // ranks sharing the host's free memory (host.bytes is 1/host_ranks)
};

struct PreflightVerdict {
  bool fits = true;
  int64_t needed = 0;     // the plan's peak per device (Plan::needed)
  int64_t available = 0;  // what the rank's device (or host share) has free
  std::string message;    // why it does not fit and what would (empty when it fits)
};

// Returns what this process, one of `host_ranks` ranks on its host, may allocate on `backend`.
RankMemory rank_memory(const Backend& backend, int host_ranks);

// Compares the plan of `config` on `nproc` ranks with what one rank (`rank`; -1: each rank of
// this host alike, as anvil launch checks) has free.
PreflightVerdict preflight_verdict(const TrainConfig& config, int nproc, int rank,
                                   const RankMemory& memory);

// Runs the check on every rank of `world` (collective: the ranks agree before any goes on) as
// config.preflight says; throws "[preflight] ..." when a rank does not fit under mode check,
// warns under warn. Returns the planned peak per device, or 0 with mode off.
int64_t run_preflight(const TrainConfig& config, const Backend& backend, Communicator& world);

// The check anvil launch runs before it starts `nproc` ranks on this host (they share its
// memory; each has a device of `backend_name` like this process's): throws or warns as
// run_preflight does, for one rank standing for all of them.
void run_launch_preflight(const TrainConfig& config, const std::string& backend_name, int nproc);

}  // namespace anvil
