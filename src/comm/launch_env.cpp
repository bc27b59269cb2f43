// Launcher detection from the environment. Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE, PMI-1/2
// launchers (MPICH's hydra, srun --mpi=pmi2) set PMI_SIZE, and PMIx launchers (srun --mpi=pmix,
// prrte) set PMIX_RANK; Slurm's SLURM_NTASKS then gives the size. The ranks per host come from
// OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS.
#include "comm/launch_env.h"

#include <cstdlib>

#include "core/error.h"

namespace anvil {
namespace {

int parse_size(const char* name, const char* value) {
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  ANVIL_CHECK(end != value && *end == '\0' && parsed >= 1 && parsed <= 1 << 24,
              "[comm] launcher variable {}='{}' is not a rank count", name, value);
  return static_cast<int>(parsed);
}

}  // namespace

LaunchEnvironment detect_launch_environment() {
  LaunchEnvironment env;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* value = std::getenv(name)) {
      env.local_size = parse_size(name, value);
      break;
    }
  }
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) {
      env.launched = true;
      env.world_size = parse_size(name, value);
      env.evidence = std::string(name) + "=" + value;
      return env;
    }
  }
  if (const char* rank = std::getenv("PMIX_RANK")) {
    env.launched = true;
    env.evidence = std::string("PMIX_RANK=") + rank;
    if (const char* tasks = std::getenv("SLURM_NTASKS"))
      env.world_size = parse_size("SLURM_NTASKS", tasks);
  }
  return env;
}

}  // namespace anvil
