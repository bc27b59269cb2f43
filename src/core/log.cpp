// Terminal detection for progress output.
#include "core/log.h"

#include <unistd.h>

namespace anvil {

bool stdout_is_terminal() { return isatty(fileno(stdout)) != 0; }

}  // namespace anvil
