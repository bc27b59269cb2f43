// Errors and checks. The library reports every failure by throwing anvil::Error; only main()
// prints and exits. Messages start with the component in brackets ("[safetensors] ...") and the
// error records the file:line that raised it. ANVIL_CHECK is always on; ANVIL_DCHECK only in
// debug builds (for invariants too costly to test in hot loops).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace anvil {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line)
      : std::runtime_error(std::move(message)), file_(file), line_(line) {}

  // Returns "file:line" of the check that failed.
  std::string where() const { return fmt::format("{}:{}", file_, line_); }

 private:
  const char* file_;
  int line_;
};

[[noreturn]] void throw_error(const char* file, int line, std::string message);

}  // namespace anvil

#define ANVIL_CHECK(cond, ...)                                                 \
  do {                                                                         \
    if (!(cond)) [[unlikely]]                                                  \
      ::anvil::throw_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__));      \
  } while (0)

#define ANVIL_FAIL(...) ::anvil::throw_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__))

#ifdef NDEBUG
#define ANVIL_DCHECK(cond, ...) \
  do {                          \
  } while (0)
#else
#define ANVIL_DCHECK(cond, ...) ANVIL_CHECK(cond, __VA_ARGS__)
#endif
