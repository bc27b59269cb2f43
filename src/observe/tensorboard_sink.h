// The metrics as TensorBoard scalars: each record becomes one event holding its
// metric_scalars (metrics.h) as floats at the record's step, so every field a record gains
// reaches TensorBoard unchanged. The event file lives in the run directory itself, so
// `tensorboard --logdir runs` shows one run per run directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "io/tensorboard_events.h"
#include "observe/metrics.h"

namespace anvil {

class TensorBoardSink : public MetricsSink {
 public:
  // Opens the run's event file, cut back to `keep_through_step` (see EventFileWriter).
  TensorBoardSink(const std::filesystem::path& run_dir, int64_t keep_through_step);

  void write(const TrainStepRecord& record) override;
  void write(const EvalRecord& record) override;

 private:
  void write_line(int64_t step, const std::string& line);
  EventFileWriter events_;
};

}  // namespace anvil
