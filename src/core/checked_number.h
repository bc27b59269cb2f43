// The one range check that every number read from a user's file or command line passes
// through (configuration TOML and --section.key=value, JSON files): a value that does not fit
// where it goes is one error naming it as written, never wrapped, saturated or truncated.
#pragma once

#include <cstdint>
#include <string_view>

namespace anvil {

// Returns `value` when it lies in [lo, hi]; else throws anvil::Error
// "<subject> is out of range: <as_written>".
int64_t checked_integer(int64_t value, int64_t lo, int64_t hi, std::string_view subject,
                        std::string_view as_written);

// Returns `value` when it is finite and within a float's range (the engine narrows reals to
// float); else throws as checked_integer does.
double checked_real(double value, std::string_view subject, std::string_view as_written);

}  // namespace anvil
