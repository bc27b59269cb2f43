// Helpers of the CLI tests: run the anvil executable and read what it prints.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace anvil::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_anvil(const std::string& args) {
  const std::string command = std::string(ANVIL_BINARY) + " " + args + " 2>&1";
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs a command that must succeed and returns its output.
inline std::string run_ok(const std::string& args) {
  const CommandResult result = run_anvil(args);
  EXPECT_EQ(result.exit_code, 0) << "anvil " << args << "\n" << result.output;
  return result.output;
}

// Returns the JSON object on the last line of an output.
inline nlohmann::json last_json_line(const std::string& output) {
  std::string text = output;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t start = text.rfind('\n');
  return nlohmann::json::parse(start == std::string::npos ? text : text.substr(start + 1));
}

inline std::string quoted(const std::filesystem::path& path) {
  std::string text = "'";
  text += path.string();
  text += '\'';
  return text;
}

}  // namespace anvil::test
