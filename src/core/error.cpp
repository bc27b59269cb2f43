// Out-of-line throw so the check macros stay small at every call site.
#include "core/error.h"

namespace anvil {

void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), file, line);
}

}  // namespace anvil
