// The message of the anvil::Error a piece of test code throws, for tests of one-line errors.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace anvil::test {

// Returns what the anvil::Error thrown by `run` says, or "" when it throws none.
inline std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace anvil::test
