// Helpers of the CLI tests: run the anvil executable and read what it prints.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "command_runner.h"

namespace anvil::test {

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
