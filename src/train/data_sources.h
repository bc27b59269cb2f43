// The trainer's view of its data: the training sample source, the validation source (absent
// when evaluation is off) and the cursor fields that identify the sample stream, opened from
// the [data] config with errors that say how to fix the problem (the `anvil prepare` command
// for a missing folder, the vocab_size to set for a too-small model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/cursor.h"
#include "data/mixture.h"
#include "data/sample_source.h"
#include "train/config.h"

namespace anvil {

// One source's validation split in a mixture, scored on its own.
struct ValidationSource {
  std::string name;   // the source's path as written in data.sources
  double weight = 0;  // its normalised mixture weight
  std::unique_ptr<SampleSource> source;
  int64_t samples = 0;  // samples scored per evaluation
};

struct TrainingData {
  std::unique_ptr<SampleSource> train;
  std::unique_ptr<SampleSource> val;  // null when training.eval_steps == 0 or for a mixture
  int64_t val_samples = 0;            // samples scored per evaluation
  MixtureSource* mixture = nullptr;   // `train` when data.sources names a mixture
  std::vector<ValidationSource> val_sources;  // a mixture's validation, one per source
  DataCursor stream;                  // identity of the training stream (next_sample = 0)
  std::string description;            // one line for the start-of-run log
};

// Opens the sources the config names; throws with a remedy on a missing or mismatched dataset.
TrainingData open_training_data(const TrainConfig& config);

// Returns the sequences per evaluation batch (eval.batch_size, else training.batch_size).
int64_t eval_batch_size(const TrainConfig& config);

// Returns the `anvil prepare` command that would create a dataset folder `dir`.
std::string prepare_command_for(const std::string& dir);

}  // namespace anvil
