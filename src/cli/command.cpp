// Registry storage and the shared argument helpers.
#include "cli/command.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/threading.h"
#include "data/line_reader.h"

namespace anvil::cli {
namespace {

// Returns the value of a failed conversion when it is a whole number: CLI11 reports one that
// does not fit the option's integer type as "Could not convert: --opt = VALUE", which hides
// that the number was understood but is out of range.
std::optional<std::pair<std::string, std::string>> out_of_range_integer(std::string_view what) {
  constexpr std::string_view kPrefix = "Could not convert: ";
  const size_t equals = what.find(" = ");
  if (!what.starts_with(kPrefix) || equals == std::string_view::npos) return std::nullopt;
  const std::string_view value = what.substr(equals + 3);
  const std::string_view digits = value.substr(value.starts_with('-') || value.starts_with('+'));
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  const std::string_view name = what.substr(kPrefix.size(), equals - kPrefix.size());
  return std::pair{std::string(name), std::string(value)};
}

// Returns "out of range: VALUE" when a whole number does not fit 64 bits (or is negative for an
// unsigned option), else "". CLI11 2.1 saturates such a number to the type's limit (or wraps
// "-1" to 2^64 - 1) without a word; a narrower type's overflow it does report, as a failed
// conversion that parse_args rewords.
std::string check_integer_text(const std::string& value, bool is_unsigned) {
  const std::string_view text = value;
  const std::string_view digits = text.substr(text.starts_with('-') || text.starts_with('+'));
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return "";
  if (is_unsigned && text.starts_with('-')) return "out of range: " + value;
  const char* begin = text.data() + (text.starts_with('+') ? 1 : 0);
  std::errc error{};
  if (is_unsigned) {
    uint64_t number = 0;
    error = std::from_chars(begin, text.data() + text.size(), number).ec;
  } else {
    int64_t number = 0;
    error = std::from_chars(begin, text.data() + text.size(), number).ec;
  }
  return error == std::errc::result_out_of_range ? "out of range: " + value : "";
}

// Gives every integer option the check above.
void check_integer_options(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    const bool is_unsigned = type.starts_with("UINT");
    if (!is_unsigned && !type.starts_with("INT")) continue;
    option->check(CLI::Validator(
        [is_unsigned](std::string& value) { return check_integer_text(value, is_unsigned); }, ""));
  }
}

std::vector<Command>& registry() {
  static std::vector<Command> all;
  return all;
}

}  // namespace

bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}

std::vector<Command> commands() {
  std::vector<Command> sorted = registry();
  std::sort(sorted.begin(), sorted.end(),
            [](const Command& a, const Command& b) { return a.order < b.order; });
  return sorted;
}

bool parse_args(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  check_integer_options(app);
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    fmt::print("{}", app.help());
    return false;
  } catch (const CLI::ConversionError& e) {
    if (const auto number = out_of_range_integer(e.what()))
      ANVIL_FAIL("[{}] {}: out of range: {} (see '{} --help')", app.get_name(), number->first,
                 number->second, app.get_name());
    ANVIL_FAIL("[{}] {} (see '{} --help')", app.get_name(), e.what(), app.get_name());
  } catch (const CLI::ParseError& e) {
    ANVIL_FAIL("[{}] {} (see '{} --help')", app.get_name(), e.what(), app.get_name());
  }
  return true;
}

void ThreadOption::add_to(CLI::App& app) {
  option = app.add_option("--threads", value,
                 "CPU threads (default: ANVIL_NUM_THREADS, else all usable cores)");
}

CLI::Option* add_max_record_bytes_option(CLI::App& app, uint64_t& value,
                                         const std::string& what) {
  return app
      .add_option("--max-record-bytes", value,
                  fmt::format("bound on one {} before anything is allocated for it, with "
                              "suffixes KiB, MiB, GiB or KB, MB, GB (default {}MiB); input is "
                              "streamed, so memory stays near this bound whatever it holds",
                              what, kDefaultMaxRecordBytes >> 20))
      ->transform(CLI::AsSizeValue(true))
      ->check(CLI::Range(uint64_t{1}, kLargestRecordBound));
}

void PreflightOption::add_to(CLI::App& app) {
  app.add_option("--preflight", mode,
                 "memory check before the run allocates (preflight.mode): check refuses a run "
                 "whose planned peak per device exceeds what the device (or, on cpu, the host) "
                 "has free and names the settings that fit; warn says so and goes on; off skips "
                 "it (default: check; the margin is --preflight.margin)")
      ->check(CLI::IsMember({"check", "warn", "off"}));
}

void PreflightOption::apply_to(std::vector<ConfigOverride>& overrides) const {
  if (!mode.empty()) overrides.push_back({"preflight.mode", mode});
}

void ThreadOption::configure() const {
  const bool given = option != nullptr && option->count() > 0;
  configure_threads(given ? std::optional<int>(value) : std::nullopt);
}

}  // namespace anvil::cli
