// world() and abort_world() for MPI builds. MPI starts only when a launcher started this
// process: a plain `anvil train` gets the single-process communicator and never pays for
// MPI_Init (slow, and noisy on machines without a network fabric configured).
#include <cstdio>
#include <cstdlib>

#include "comm/launch_env.h"
#include "comm/mpi/mpi_communicator.h"

namespace anvil {
namespace {

std::unique_ptr<Communicator> make_world() {
  if (!detect_launch_environment().launched) return make_single_process_communicator();
  mpi::start();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return mpi::make_mpi_communicator(comm);
}

}  // namespace

Communicator& world() {
  static std::unique_ptr<Communicator> instance = make_world();
  return *instance;
}

void abort_world(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int ranks = 1;
  if (mpi::active() && MPI_Comm_size(MPI_COMM_WORLD, &ranks) == MPI_SUCCESS && ranks > 1) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this only guards a broken library
  }
  std::exit(code);
}

}  // namespace anvil
