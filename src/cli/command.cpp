// Registry storage and the shared argument helpers.
#include "cli/command.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/threading.h"

namespace anvil::cli {
namespace {

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
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    fmt::print("{}", app.help());
    return false;
  } catch (const CLI::ParseError& e) {
    ANVIL_FAIL("[{}] {} (see '{} --help')", app.get_name(), e.what(), app.get_name());
  }
  return true;
}

void ThreadOption::add_to(CLI::App& app) {
  option = app.add_option("--threads", value,
                 "CPU threads (default: ANVIL_NUM_THREADS, else all usable cores)");
}

void ThreadOption::configure() const {
  const bool given = option != nullptr && option->count() > 0;
  configure_threads(given ? std::optional<int>(value) : std::nullopt);
}

}  // namespace anvil::cli
