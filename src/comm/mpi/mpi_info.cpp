// MPI library description; MPI_Get_library_version may be called before MPI_Init.
#include <string>

#include "comm/mpi/mpi_runtime.h"

namespace anvil {

std::string mpi_description() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string text(version, static_cast<size_t>(length));
  if (auto cut = text.find_first_of(",\n"); cut != std::string::npos) text.resize(cut);
  return "available (" + text + ")";
}

}  // namespace anvil
