// metrics.jsonl writing and the resume-time cut. Lines are built with fmt rather than a JSON
// library so the field order and the number text are fixed (see metrics.h).
#include "train/metrics.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/file_util.h"

namespace anvil {

std::string format_metrics_line(const TrainStepRecord& r) {
  return fmt::format(
      "{{\"type\":\"train\",\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},\"tokens\":{},"
      "\"tokens_per_s\":{:.1f},\"elapsed_s\":{:.3f}}}",
      r.step, r.loss, r.lr, r.grad_norm, r.tokens, r.tokens_per_s, r.elapsed_s);
}

std::string format_metrics_line(const EvalRecord& r) {
  return fmt::format(
      "{{\"type\":\"eval\",\"step\":{},\"loss\":{},\"ppl\":{},\"tokens\":{},\"elapsed_s\":{:.3f}}}",
      r.step, r.loss, r.perplexity, r.tokens, r.elapsed_s);
}

MetricsWriter::MetricsWriter(std::filesystem::path path, int64_t keep_through_step)
    : path_(std::move(path)) {
  std::string kept;
  if (keep_through_step >= 0 && std::filesystem::exists(path_)) {
    std::istringstream lines(read_file(path_));
    for (std::string line; std::getline(lines, line);) {
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      // A torn last line (crash mid-write) is not valid JSON and is dropped.
      if (record.is_discarded() || !record.contains("step")) continue;
      if (record["step"].get<int64_t>() <= keep_through_step) kept += line + "\n";
    }
  }
  write_file_atomic(path_, kept);
  file_ = std::fopen(path_.c_str(), "ab");
  ANVIL_CHECK(file_ != nullptr, "[metrics] cannot open {} for appending", path_.string());
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const TrainStepRecord& record) {
  append_line(format_metrics_line(record));
}

void MetricsWriter::write(const EvalRecord& record) { append_line(format_metrics_line(record)); }

void MetricsWriter::append_line(const std::string& line) {
  const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF &&
                  std::fflush(file_) == 0;
  ANVIL_CHECK(ok, "[metrics] cannot write to {}", path_.string());
}

}  // namespace anvil
