// TensorBoardSink: each record's metrics.jsonl line, read back as JSON, becomes one event of
// float scalars at the record's step. Reading the line (rather than the record's members)
// keeps one list of fields, format_metrics_line's, for every sink.
#include "observe/tensorboard_sink.h"

#include <nlohmann/json.hpp>

#include "io/file_util.h"

namespace anvil {

TensorBoardSink::TensorBoardSink(const std::filesystem::path& run_dir, int64_t keep_through_step)
    : events_(run_dir, keep_through_step, host_name()) {}

void TensorBoardSink::write(const TrainStepRecord& record) {
  write_line(record.step, format_metrics_line(record));
}

void TensorBoardSink::write(const EvalRecord& record) {
  write_line(record.step, format_metrics_line(record));
}

void TensorBoardSink::write_line(int64_t step, const std::string& line) {
  std::vector<TensorBoardScalar> scalars;
  for (const MetricScalar& scalar : metric_scalars(nlohmann::ordered_json::parse(line))) {
    scalars.push_back({scalar.tag, static_cast<float>(scalar.value)});
  }
  events_.write(step, scalars);
}

}  // namespace anvil
