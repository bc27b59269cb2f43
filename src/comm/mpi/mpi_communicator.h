// The MPI communicator for CPU tensors. Built by world() over a duplicate of MPI_COMM_WORLD
// and by split(); it owns its MPI communicators and frees them unless MPI is already
// finalised (a communicator kept in a static may outlive MPI).
#pragma once

#include <memory>

#include "comm/mpi/mpi_runtime.h"

namespace anvil::mpi {

// Returns a Communicator that takes ownership of `comm` (MPI must be started).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

}  // namespace anvil::mpi
