// MPI plumbing shared by the MPI communicator: the MPI_CHECK error wrapper, the mapping from
// DType and ReduceOp to MPI handles, and the process-wide start (MPI_Init_thread, user ops)
// and finish (MPI_Finalize at exit). Only src/comm/mpi includes <mpi.h>.
#pragma once

// Only MPI's C API is used; Open MPI's and MPICH's mpi.h would otherwise pull in the removed
// C++ bindings, which need a library anvil does not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "comm/communicator.h"

// Calls an MPI function and throws "[mpi] MPI_Xxx failed: <MPI's error string>" unless it
// returns MPI_SUCCESS (communicators are set to MPI_ERRORS_RETURN so errors come back here).
#define MPI_CHECK(call)                                                        \
  do {                                                                         \
    const int mpi_check_code = (call);                                         \
    if (mpi_check_code != MPI_SUCCESS) [[unlikely]]                            \
      ::anvil::mpi::fail(mpi_check_code, #call, __FILE__, __LINE__);           \
  } while (0)

namespace anvil::mpi {

// Throws the anvil::Error for a failed MPI call; `call_text` is the call as written.
[[noreturn]] void fail(int code, const char* call_text, const char* file, int line);

// Initialises MPI once per process (thread level MULTIPLE, at least SERIALIZED) and registers
// MPI_Finalize at exit; a no-op when already started.
void start();
// Returns whether MPI is initialised and not yet finalised.
bool active();

// Returns the MPI datatype that carries `dtype` (16-bit floats travel as MPI_UINT16_T).
MPI_Datatype datatype_of(DType dtype);
// Returns whether the reduction runs as anvil's rank-order sum rather than an MPI_Op.
bool runs_as_ordered_sum(ReduceOp op, DType dtype);
// Returns the MPI_Op for a reduction that does not run as an ordered sum.
MPI_Op op_for(ReduceOp op, DType dtype);
// Returns numel as an MPI count, failing clearly past INT_MAX elements.
int count_of(const Tensor& t, const char* what);

}  // namespace anvil::mpi
