// Pieces shared by every Communicator implementation: argument checks, so a wrong call fails
// the same way (one "[comm] ..." line) whether it runs on one process or many, and fails
// before any rank enters a collective that the others would then wait on forever; and the
// handle of an operation that finished before its async call returned.
#pragma once

#include "comm/communicator.h"

namespace anvil {

// Returns a handle whose operation is already complete.
std::unique_ptr<CommHandle> make_completed_handle();

// Checks that `t` is a CPU tensor with memory (or has no elements); `what` names it.
void check_host_tensor(const Tensor& t, const char* what);
// Checks reduce_scatter's sizes and dtypes: in has size * out.numel() elements, no overlap.
void check_reduce_scatter_args(const Tensor& in, const Tensor& out, int size);
// Checks all_gather's sizes and dtypes: out has size * in.numel() elements and `in` is either
// apart from `out` or exactly this rank's slice of it.
void check_all_gather_args(const Tensor& in, const Tensor& out, int rank, int size);
// Returns whether all_gather's `in` is this rank's own slice of `out` (the in-place form).
bool all_gather_is_in_place(const Tensor& in, const Tensor& out, int rank);
// Checks that `peer` names a rank of a communicator of `size` ranks; `role` is "root", "peer".
void check_rank_arg(int peer, int size, const char* role);

}  // namespace anvil
