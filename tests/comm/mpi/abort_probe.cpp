// Run as `mpirun -np 2 comm_mpi_abort_probe`: rank 1 hits a fatal error and calls abort_world
// while rank 0 waits in a barrier that rank 1 will never enter. The job must end (mpirun
// reports MPI_ABORT from rank 1) instead of hanging until the test's timeout.
#include <cstdio>

#include "comm/communicator.h"

int main() {
  anvil::Communicator& world = anvil::world();
  if (world.rank() == 1) {
    std::fprintf(stderr, "abort probe: rank 1 aborting\n");
    anvil::abort_world(7);
  }
  world.barrier();
  std::fprintf(stderr, "abort probe: rank %d passed the barrier, which must not happen\n",
               world.rank());
  return 0;
}
