// Pending MPI operations behind CommHandle: one non-blocking collective (MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather), or anvil's rank-order sums, which run as rounds
// of point-to-point messages on a communicator of their own so that their tags never meet
// user send/recv traffic and their rounds may complete in any order relative to other ops.
#pragma once

#include <memory>

#include "comm/mpi/mpi_runtime.h"
#include "core/buffer.h"

namespace anvil::mpi {

// Returns a handle that completes with `request` (already started). `name` (a string literal)
// is what the collective watchdog reports while wait() blocks.
std::unique_ptr<CommHandle> make_request_handle(MPI_Request request, const char* name);
// Returns a handle for a started MPI_Irecv from `peer` that, once complete, checks that the
// message held `expected` elements of `type` (a shorter message is an error, not silence).
std::unique_ptr<CommHandle> make_recv_handle(MPI_Request request, int expected, MPI_Datatype type,
                                             int peer);

// Starts the deterministic all_reduce of `t` in place over `comm`: each rank receives every
// rank's copy of one chunk and adds them in rank order as they arrive (an ordered
// reduce-scatter), then sends the sum to every rank (an all-gather), so each rank receives
// 2 (size - 1) / size of the tensor, as in a ring. `tag` must be the same on every rank and
// unique among this communicator's pending operations; `name` as above. Staging from
// `staging`, counted as communication until the handle is destroyed: two receive buffers of
// one chunk, a copy of this rank's own chunk (ranks > 0) and, for 16-bit floats, the chunk's
// f32 totals.
std::unique_ptr<CommHandle> start_ordered_all_reduce(const Tensor& t, MPI_Comm comm, int tag,
                                                     const char* name, Allocator& staging);
// Starts the deterministic reduce_scatter: rank r receives every rank's slice r of `in` and
// adds them in rank order into `out` as they arrive. `tag`, `name` as above; staging: two
// receive buffers of one slice (and the f32 totals of a 16-bit slice).
std::unique_ptr<CommHandle> start_ordered_reduce_scatter(const Tensor& in, const Tensor& out,
                                                         MPI_Comm comm, int tag,
                                                         const char* name, Allocator& staging);

}  // namespace anvil::mpi
