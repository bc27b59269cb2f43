// Logging. Informational lines go to stdout (they are the user's progress view); warnings
// and errors go to stderr. Rank-aware prefixes are added by the parallel layer, not here.
#pragma once

#include <fmt/format.h>

#include <cstdio>

namespace anvil {

// Returns true when stdout is an interactive terminal (progress lines may then redraw).
bool stdout_is_terminal();

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stdout, "{}\n", fmt::format(f, std::forward<Args>(args)...));
  std::fflush(stdout);
}

template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "warning: {}\n", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace anvil
