// Command registry for the `anvil` executable. Each command lives in its own cmd_<name>.cpp
// and registers itself with ANVIL_COMMAND, so adding a command touches no central switch.
// A command's run() receives the arguments after its name and returns the exit code; it
// reports failures by throwing anvil::Error (main prints one line and exits non-zero).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/config.h"

namespace anvil::cli {

struct Command {
  std::string name;     // may contain a space for two-word commands ("tokenizer train")
  std::string summary;  // one line for `anvil --help`
  int order;            // position in `anvil --help`
  std::function<int(const std::vector<std::string>& args)> run;
};

// Registers a command; called from static initialisers via ANVIL_COMMAND.
bool register_command(Command command);
// Returns every registered command sorted by order.
std::vector<Command> commands();

// Parses `args` with a CLI11 app whose name is "anvil <command>"; returns false (after
// printing help) when --help was given. Parse errors become one-line anvil::Errors.
bool parse_args(CLI::App& app, const std::vector<std::string>& args);
// Adds --threads and applies it (with ANVIL_NUM_THREADS) after parsing via configure().
struct ThreadOption {
  int value = 0;
  CLI::Option* option = nullptr;  // to tell "--threads 0" (an error) from no flag
  void add_to(CLI::App& app);
  void configure() const;
};

// Adds --max-record-bytes (data/line_reader.h): the bound on one line or record of
// line-oriented input, with size suffixes (KiB, MiB, GiB); `value` holds the default.
CLI::Option* add_max_record_bytes_option(CLI::App& app, uint64_t& value, const std::string& what);

// Adds --preflight=check|warn|off, the pre-flight memory check's mode: a shorter spelling of
// --preflight.mode, appended to the configuration overrides after parsing (apply_to).
struct PreflightOption {
  std::string mode;
  void add_to(CLI::App& app);
  void apply_to(std::vector<ConfigOverride>& overrides) const;
};

}  // namespace anvil::cli

#define ANVIL_CONCAT_INNER(a, b) a##b
#define ANVIL_CONCAT(a, b) ANVIL_CONCAT_INNER(a, b)
#define ANVIL_COMMAND(...) \
  static const bool ANVIL_CONCAT(anvil_command_registered_, __LINE__) = \
      ::anvil::cli::register_command(::anvil::cli::Command{__VA_ARGS__})
