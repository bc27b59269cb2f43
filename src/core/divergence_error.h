// DivergenceError: training diverged (a non-finite loss, gradient norm or weight). It is an
// anvil::Error like any other, except that main() ends the process with kExitDiverged rather
// than 1, so that `anvil launch` can tell it from a crash and not restart the job: resumed
// from the same checkpoint with the same settings it would only diverge again.
#pragma once

#include "core/error.h"

namespace anvil {

// Exit status of a process (and, through MPI_Abort, of a job) stopped by a DivergenceError.
constexpr int kExitDiverged = 4;

class DivergenceError : public Error {
 public:
  using Error::Error;
};

}  // namespace anvil
