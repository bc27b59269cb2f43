// The device communicator of a backend without a collective library of its own (the simulated
// device; `sim` and any port before its NCCL-like library): a host collective library (MPI)
// run on the backend's device memory directly, never through host staging copies. Every
// collective runs on a communication stream of the backend (Backend::create_stream), on the
// tensors' host views (Backend::host_view: the simulator's kernel view), after the compute
// work issued before the call (an event of the compute stream), so it overlaps the compute
// issued after it. The ordered sums' receive buffers are device memory of the backend,
// counted as MemoryCategory::communication. Each communicator has its own stream and its own
// copy of the host communicator (collective over the bootstrap), so its collectives keep
// their issue order and never interleave with calls other threads make on the bootstrap; the
// host library must allow calls from several threads (MPI_THREAD_MULTIPLE).
// A handle's wait() blocks the host until the collective has run; blocking variants are the
// async ones waited at once, so results are those of the host communicator, bit for bit.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace anvil {

// Returns a communicator over the ranks of `bootstrap` (which must outlive it only during
// this call) moving tensors of `backend` (which must outlive it). Collective over `bootstrap`.
std::unique_ptr<Communicator> make_stream_communicator(Communicator& bootstrap, Backend& backend);

}  // namespace anvil
