// metrics.jsonl writing and the resume-time cut. Lines are built with fmt rather than a JSON
// library so the field order and the number text are fixed (see metrics.h).
#include "train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/file_util.h"

namespace anvil {
namespace {

// JSON has no NaN or Infinity.
std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : std::string("null");
}

}  // namespace

std::string format_metrics_line(const TrainStepRecord& r) {
  return fmt::format(
      "{{\"type\":\"train\",\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},\"tokens\":{},"
      "\"skipped_steps\":{},\"tokens_per_s\":{:.1f},\"elapsed_s\":{:.3f}}}",
      r.step, json_number(r.loss), json_number(r.lr), json_number(r.grad_norm), r.tokens,
      r.skipped_steps, std::isfinite(r.tokens_per_s) ? r.tokens_per_s : 0.0, r.elapsed_s);
}

std::string format_metrics_line(const EvalRecord& r) {
  std::string line = fmt::format("{{\"type\":\"eval\",\"step\":{}", r.step);
  if (r.has_loss) {
    line += fmt::format(",\"loss\":{},\"ppl\":{},\"tokens\":{}", json_number(r.loss),
                        json_number(r.perplexity), r.tokens);
  }
  for (const auto& [name, value] : r.task_scores) {
    line += fmt::format(",\"{}\":{}", name, json_number(value));
  }
  return line + fmt::format(",\"elapsed_s\":{:.3f}}}", r.elapsed_s);
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
  size_ = kept.size();
  do {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  } while (fd_ < 0 && errno == EINTR);
  ANVIL_CHECK(fd_ >= 0, "[metrics] cannot open {} for appending: {}", path_.string(),
              std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const TrainStepRecord& record) {
  append_line(format_metrics_line(record));
}

void MetricsWriter::write(const EvalRecord& record) { append_line(format_metrics_line(record)); }

void MetricsWriter::append_line(const std::string& line) {
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : std::string("no progress");
      // A torn line would make the file invalid JSON Lines; drop it.
      if (done > 0 && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
        ANVIL_FAIL("[metrics] cannot write {}: {} (and cannot cut the torn line off: {})",
                   path_.string(), reason, std::strerror(errno));
      }
      ANVIL_FAIL("[metrics] cannot write {}: {}", path_.string(), reason);
    }
    done += static_cast<size_t>(n);
  }
  size_ += text.size();
}

}  // namespace anvil
