// Helpers for the `anvil train` end-to-end tests: run the built binary (command_runner.h), make
// scratch folders, and read metrics.jsonl with the wall-clock fields removed (the only
// fields allowed to differ between two runs that train the same steps).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "command_runner.h"

namespace anvil::testing_support {

using test::CommandResult;
using test::run_anvil;
using test::run_shell;

// Returns a fresh, empty scratch folder for one test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("anvil_train_test_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Returns the lines of a run's metrics.jsonl with the wall-clock and memory fields removed
// (the memory a process measures depends on what it did since it started, so a resumed run
// differs) and without the records of a world-size change (a run resumed on another world
// size has one, the straight run none); everything else must match byte for byte between
// equivalent runs.
inline std::vector<std::string> deterministic_metrics(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  std::vector<std::string> lines;
  const std::regex measured_fields(
      R"re(,"(mem_bytes|mem_peak_bytes|mem_planned_bytes|tokens_per_s|mfu|host_waits|readback_bytes|elapsed_s)":[-0-9.eE+]+)re"
      R"re(|,"mem_peak":\{[^}]*\})re");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(R"({"type":"world")", 0) == 0) continue;
    lines.push_back(std::regex_replace(line, measured_fields, ""));
  }
  return lines;
}

// Returns how many lines of `lines` contain `needle`.
inline int count_containing(const std::vector<std::string>& lines, const std::string& needle) {
  int count = 0;
  for (const auto& line : lines) count += line.find(needle) != std::string::npos;
  return count;
}

// Returns how many times `needle` occurs in `text`.
inline int occurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

// A very small model on synthetic data: a step takes milliseconds.
inline std::string tiny_synthetic_args() {
  return "--threads 1 --data.synthetic=true --model.dim=32 --model.n_layers=2 "
         "--model.n_heads=4 --model.n_kv_heads=2 --model.ffn_dim=64 --model.vocab_size=128 "
         "--model.max_seq_len=32 --training.batch_size=2 --training.grad_accum=2 "
         "--training.seq_len=16 --training.eval_steps=2 --training.eval_every=10 "
         "--optimizer.warmup_steps=5 --logging.every=1000";
}

}  // namespace anvil::testing_support
