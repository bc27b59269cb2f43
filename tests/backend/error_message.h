// The message of the anvil::Error a call throws, for tests that match error lines.
#pragma once

#include <string>

#include "core/error.h"

namespace anvil::test {

// Returns the message of the anvil::Error that fn throws, or "" when it does not throw.
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace anvil::test
