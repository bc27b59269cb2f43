// Entry point: dispatches `anvil <command> ...` to the registered commands and turns every
// anvil::Error into one line on stderr and a non-zero exit. Nothing below main() exits.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cli/command.h"
#include "comm/communicator.h"
#include "core/divergence_error.h"
#include "core/error.h"

namespace {

void print_usage() {
  fmt::print("anvil {} - train and fine-tune Llama-family models on CPUs and accelerators\n\n",
             ANVIL_VERSION);
  fmt::print("usage: anvil <command> [options]     (anvil <command> --help for its options)\n\n");
  fmt::print("commands:\n");
  for (const auto& c : anvil::cli::commands()) fmt::print("  {:<18} {}\n", c.name, c.summary);
  fmt::print("\nenvironment: ANVIL_NUM_THREADS sets the default CPU thread count.\n");
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage();
    return 0;
  }
  if (args[0] == "--version") {
    fmt::print("anvil {}\n", ANVIL_VERSION);
    return 0;
  }
  // Two-word commands ("tokenizer train") take precedence over one-word ones.
  for (const auto& c : anvil::cli::commands()) {
    const bool two_words = c.name.find(' ') != std::string::npos;
    if (two_words && args.size() >= 2 && c.name == args[0] + " " + args[1])
      return c.run(std::vector<std::string>(args.begin() + 2, args.end()));
  }
  for (const auto& c : anvil::cli::commands()) {
    if (c.name == args[0]) return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  ANVIL_FAIL("[cli] unknown command '{}' (run 'anvil --help' for the list)", args[0]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const anvil::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "anvil: error: {}\n", e.what());
    // Under MPI a plain return would block in MPI_Finalize while peers wait in a collective.
    // A diverged run gets its own status: `anvil launch` does not restart it.
    const bool diverged = dynamic_cast<const anvil::DivergenceError*>(&e) != nullptr;
    anvil::abort_world(diverged ? anvil::kExitDiverged : 1);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "anvil: internal error: {}\n", e.what());
    anvil::abort_world(3);
  }
}
