// World for builds without MPI: always one process. Being started by mpirun or srun with
// several ranks is an error here, since each rank would otherwise train alone, unaware of
// the others, and write the same checkpoints.
#include <cstdio>
#include <cstdlib>

#include "comm/communicator.h"
#include "comm/launch_env.h"

namespace anvil {
namespace {

std::unique_ptr<Communicator> make_world() {
  const LaunchEnvironment env = detect_launch_environment();
  ANVIL_CHECK(!env.launched || env.world_size == 1,
              "[comm] started by a multi-process launcher ({}) but this anvil was built "
              "without MPI; rebuild with MPI found at configure time",
              env.evidence);
  return make_single_process_communicator();
}

}  // namespace

Communicator& world() {
  static std::unique_ptr<Communicator> single = make_world();
  return *single;
}

void abort_world(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(code);
}

std::string mpi_description() { return "not built (MPI was not found at configure time)"; }

}  // namespace anvil
