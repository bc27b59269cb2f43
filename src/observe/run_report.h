// `anvil report`: a run directory rendered as one self-contained HTML page. It reads
// metrics.jsonl (every record through metric_scalars, so fields a record gains appear without
// changes here), config.toml and, when present, sharding.json, and draws inline SVG charts
// over steps: loss (train and validation), learning rate, gradient norm, tokens/s, MFU, the
// measured memory (held and peak), each object group of the records (the per-category memory
// peaks, mem_peak/...), evaluation scores, then any other series. The page has
// no script and names no file or address outside itself, so it works offline and as an
// attachment. Bad input fails before anything is written, naming the file and line.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace anvil {

struct MetricSeries {
  std::string tag;                                // as metric_scalars names it
  std::vector<std::pair<double, double>> points;  // (step, value) in file order
};

// Returns the series of a metrics.jsonl file, in the order their tags first appear; throws
// "[report] FILE:LINE: ..." for a line that is not a record.
std::vector<MetricSeries> read_metric_series(const std::filesystem::path& metrics_path);

// Returns the report page of the run directory `run_dir`; `default_config` (TOML: the built-in
// defaults, from the training layer above) marks the keys a run changed.
std::string render_run_report(const std::filesystem::path& run_dir,
                              const std::string& default_config);

// Writes the report page of `run_dir` to `out` atomically.
void write_run_report(const std::filesystem::path& run_dir, const std::string& default_config,
                      const std::filesystem::path& out);

}  // namespace anvil
