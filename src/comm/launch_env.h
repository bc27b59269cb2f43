// Detects whether a process manager (Open MPI's mpirun, Slurm's srun, any PMI/PMIx launcher)
// started this process, from the environment variables such launchers set. world() uses it
// to decide whether to start MPI at all: a plain `anvil train` must not pay for MPI_Init.
#pragma once

#include <string>

namespace anvil {

struct LaunchEnvironment {
  bool launched = false;  // a launcher variable is present
  int world_size = 0;     // ranks the launcher announced; 0 when it did not say
  std::string evidence;   // the variable that told us, e.g. "OMPI_COMM_WORLD_SIZE=4"
  // Ranks on this host (they share its memory): OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI),
  // MPI_LOCALNRANKS (MPICH's hydra); 1 when the launcher does not say.
  int local_size = 1;
};

// Returns what the environment says about the launcher of this process.
LaunchEnvironment detect_launch_environment();

}  // namespace anvil
