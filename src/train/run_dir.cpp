// Run directory creation and naming.
#include "train/run_dir.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <system_error>

#include "core/error.h"
#include "io/file_util.h"

namespace anvil {

std::filesystem::path default_run_dir(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return std::filesystem::path("runs") / fmt::format("{}-{:%Y%m%d-%H%M%S}", name, local);
}

RunDir create_run_dir(const std::filesystem::path& root) {
  RunDir run{root};
  std::error_code error;
  std::filesystem::create_directories(run.checkpoints_dir(), error);
  ANVIL_CHECK(!error, "[run] cannot create run directory {}: {}", run.checkpoints_dir().string(),
              error.message());
  return run;
}

void write_run_config(const RunDir& run, const TrainConfig& config) {
  write_file_atomic(run.config_path(), config_to_toml(config));
}

std::string shell_quote(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./=:,+@%") == std::string::npos;
  if (plain) return arg;
  std::string quoted = "'";
  for (const char c : arg) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

}  // namespace anvil
