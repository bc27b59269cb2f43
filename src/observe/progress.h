// The progress view of a training run on stdout. On a terminal one line is redrawn in place
// every step; otherwise (a log file, a pipe) a plain line is printed every `every` steps, at
// the first and last step, and at the first step this process runs (a resumed run shows where
// it continues), so logs stay readable and grep-able. Messages printed between
// steps (evaluations, checkpoints) go through message() so they never collide with the
// redrawn line.
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

struct ProgressStep {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double gflops_per_s = 0;
  double eta_s = 0;
  double rss_mb = 0;
};

class ProgressPrinter {
 public:
  ProgressPrinter(bool terminal, int64_t every) : terminal_(terminal), every_(every) {}
  ~ProgressPrinter();

  // Shows one step (redraws the line on a terminal; a plain line when due otherwise).
  void step(const ProgressStep& step);
  // Prints a full line, first ending a redrawn progress line if one is showing.
  void message(const std::string& line);

 private:
  bool terminal_;
  int64_t every_;
  bool line_open_ = false;
  bool printed_a_step_ = false;
};

// Returns "2m05s", "1h03m" or "12s" for a duration in seconds.
std::string format_duration(double seconds);
// Returns "12.3k" style text for a rate.
std::string format_rate(double value);
// Returns the process's peak resident set size in MiB (getrusage ru_maxrss).
double peak_rss_mb();

}  // namespace anvil
