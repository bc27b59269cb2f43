// Range checks of numbers read from user input (see checked_number.h).
#include "core/checked_number.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace anvil {

int64_t checked_integer(int64_t value, int64_t lo, int64_t hi, std::string_view subject,
                        std::string_view as_written) {
  ANVIL_CHECK(value >= lo && value <= hi, "{} is out of range: {}", subject, as_written);
  return value;
}

double checked_real(double value, std::string_view subject, std::string_view as_written) {
  ANVIL_CHECK(std::isfinite(value) && std::fabs(value) <= std::numeric_limits<float>::max(),
              "{} is out of range: {}", subject, as_written);
  return value;
}

}  // namespace anvil
