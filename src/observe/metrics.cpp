// metrics.jsonl writing, the resume-time cut and the records' scalars. Lines are built with fmt
// rather than a JSON library so the field order and the number text are fixed (see metrics.h).
#include "observe/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "io/append_file.h"
#include "io/file_util.h"

namespace anvil {
namespace {

// JSON has no NaN or Infinity.
std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : std::string("null");
}

void flatten(const std::string& tag, const nlohmann::ordered_json& value,
             std::vector<MetricScalar>& out) {
  if (value.is_number()) {
    out.push_back({tag, value.get<double>()});
  } else if (value.is_object()) {
    for (const auto& [key, member] : value.items()) flatten(tag + "/" + key, member, out);
  }
}

// Returns ',"mem_bytes":..,"mem_peak_bytes":..[,"mem_planned_bytes":..],"mem_peak":{...}', or
// "" when not measured.
std::string memory_fields(const TrainStepRecord& r) {
  if (r.mem_bytes < 0) return "";
  std::string peaks;
  for (size_t c = 0; c < r.mem_peak.size(); ++c) {
    peaks += fmt::format("{}\"{}\":{}", c == 0 ? "" : ",", kMemoryCategoryNames[c], r.mem_peak[c]);
  }
  const std::string planned =
      r.mem_planned_bytes > 0 ? fmt::format(",\"mem_planned_bytes\":{}", r.mem_planned_bytes)
                              : std::string();
  return fmt::format(",\"mem_bytes\":{},\"mem_peak_bytes\":{}{},\"mem_peak\":{{{}}}", r.mem_bytes,
                     r.mem_peak_bytes, planned, peaks);
}

// Returns ',"name":{"key":value,...}', or "" when there are no entries.
template <typename T>
std::string object_field(const char* name, const std::vector<std::pair<std::string, T>>& entries) {
  if (entries.empty()) return "";
  std::string members;
  for (const auto& [key, value] : entries) {
    std::string text;
    if constexpr (std::is_floating_point_v<T>) {
      text = json_number(value);
    } else {
      text = fmt::format("{}", value);
    }
    members += fmt::format("{}{}:{}", members.empty() ? "" : ",", nlohmann::json(key).dump(),
                           text);
  }
  return fmt::format(",\"{}\":{{{}}}", name, members);
}

}  // namespace

std::string format_metrics_line(const TrainStepRecord& r) {
  // The step's machine observations last: its speed, then how it waited on the device.
  return fmt::format(
      "{{\"type\":\"train\",\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},\"tokens\":{},"
      "\"skipped_steps\":{}{}{}{},\"tokens_per_s\":{:.1f}{},\"host_waits\":{},"
      "\"readback_bytes\":{},\"elapsed_s\":{:.3f}}}",
      r.step, json_number(r.loss), json_number(r.lr), json_number(r.grad_norm), r.tokens,
      r.skipped_steps, r.loss_scale > 0 ? fmt::format(",\"loss_scale\":{}", r.loss_scale) : "",
      object_field("source_tokens", r.source_tokens), memory_fields(r),
      std::isfinite(r.tokens_per_s) ? r.tokens_per_s : 0.0,
      r.mfu >= 0 && std::isfinite(r.mfu) ? fmt::format(",\"mfu\":{:.4g}", r.mfu) : "",
      r.host_waits, r.readback_bytes, r.elapsed_s);
}

std::string format_metrics_line(const WorldChangeRecord& r) {
  return fmt::format("{{\"type\":\"world\",\"step\":{},\"world\":{},\"previous\":{}}}", r.step,
                     r.world, r.previous);
}

std::string format_metrics_line(const EvalRecord& r) {
  std::string line = fmt::format("{{\"type\":\"eval\",\"step\":{}", r.step);
  if (r.has_loss) {
    line += fmt::format(",\"loss\":{},\"ppl\":{},\"tokens\":{}", json_number(r.loss),
                        json_number(r.perplexity), r.tokens);
  }
  line += object_field("source_val_loss", r.source_val_loss);
  for (const auto& [name, value] : r.task_scores) {
    line += fmt::format(",\"{}\":{}", name, json_number(value));
  }
  return line + fmt::format(",\"elapsed_s\":{:.3f}}}", r.elapsed_s);
}

std::vector<MetricScalar> metric_scalars(const nlohmann::ordered_json& record) {
  const std::string type = record.value("type", std::string("metrics"));
  std::vector<MetricScalar> scalars;
  for (const auto& [key, value] : record.items()) {
    if (key == "type" || key == "step") continue;
    flatten(value.is_object() ? key : type + "/" + key, value, scalars);
  }
  return scalars;
}

MetricsWriter::MetricsWriter(std::filesystem::path path, int64_t keep_through_step) {
  std::string kept;
  if (keep_through_step >= 0 && std::filesystem::exists(path)) {
    std::istringstream lines(read_file(path));
    for (std::string line; std::getline(lines, line);) {
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      // A torn last line (crash mid-write) is not valid JSON and is dropped.
      if (record.is_discarded() || !record.contains("step")) continue;
      const int64_t step = record["step"].get<int64_t>();
      const bool redone = step == keep_through_step && record.value("type", "") == "world";
      if (step <= keep_through_step && !redone) kept += line + "\n";
    }
  }
  write_file_atomic(path, kept);
  file_ = std::make_unique<AppendFile>(std::move(path), "[metrics]");
}

MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::write(const TrainStepRecord& record) {
  file_->append(format_metrics_line(record) + "\n");
}

void MetricsWriter::write(const EvalRecord& record) {
  file_->append(format_metrics_line(record) + "\n");
}

void MetricsWriter::write(const WorldChangeRecord& record) {
  file_->append(format_metrics_line(record) + "\n");
}

void MetricsSinks::write(const TrainStepRecord& record) {
  for (const auto& sink : sinks_) sink->write(record);
}

void MetricsSinks::write(const EvalRecord& record) {
  for (const auto& sink : sinks_) sink->write(record);
}

void MetricsSinks::write(const WorldChangeRecord& record) {
  for (const auto& sink : sinks_) sink->write(record);
}

}  // namespace anvil
