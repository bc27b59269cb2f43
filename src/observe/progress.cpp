// Progress line formatting and the terminal/plain-log switch.
#include "observe/progress.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>

namespace anvil {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total % 3600) / 60);
  if (total >= 60) return fmt::format("{}m{:02}s", total / 60, total % 60);
  return fmt::format("{}s", total);
}

std::string format_rate(double value) {
  if (value >= 1e6) return fmt::format("{:.2f}M", value / 1e6);
  if (value >= 1e3) return fmt::format("{:.1f}k", value / 1e3);
  return fmt::format("{:.0f}", value);
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

ProgressPrinter::~ProgressPrinter() {
  if (line_open_) std::fputc('\n', stdout);
}

void ProgressPrinter::step(const ProgressStep& s) {
  const int width = static_cast<int>(std::to_string(s.total_steps).size());
  const std::string line = fmt::format(
      "step {:>{}}/{} | loss {:.4f} | lr {:.2e} | gnorm {:.3f} | {} tok/s | {:.1f} GFLOP/s | "
      "rss {:.0f} MB | eta {}",
      s.step, width, s.total_steps, s.loss, s.lr, s.grad_norm, format_rate(s.tokens_per_s),
      s.gflops_per_s, s.rss_mb, format_duration(s.eta_s));
  if (terminal_) {
    fmt::print(stdout, "\r\033[K{}", line);
    line_open_ = true;
  } else if (!printed_a_step_ || s.step == s.total_steps || s.step % every_ == 0) {
    fmt::print(stdout, "{}\n", line);
  }
  printed_a_step_ = true;
  std::fflush(stdout);
}

void ProgressPrinter::message(const std::string& line) {
  if (line_open_) {
    std::fputc('\n', stdout);
    line_open_ = false;
  }
  fmt::print(stdout, "{}\n", line);
  std::fflush(stdout);
}

}  // namespace anvil
