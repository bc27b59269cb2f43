// Running commands from tests: the anvil executable (ANVIL_BINARY, defined for every test
// binary) or any shell line, with its exit code and output. The one copy the CLI tests of
// every layer share.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace anvil::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // what the command wrote to stdout (and stderr, where joined)
};

// Runs a shell command line and returns its exit code (-1 when it did not exit normally) and
// what it wrote to stdout; stderr goes wherever the line sends it.
inline CommandResult run_capturing_stdout(const std::string& command_line) {
  CommandResult result;
  FILE* pipe = popen(command_line.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs a shell command line with stderr joined to stdout.
inline CommandResult run_shell(const std::string& command_line) {
  return run_capturing_stdout(command_line + " 2>&1");
}

// Runs `anvil <args>` with stderr joined to stdout.
inline CommandResult run_anvil(const std::string& args) {
  return run_shell(std::string(ANVIL_BINARY) + " " + args);
}

}  // namespace anvil::test
