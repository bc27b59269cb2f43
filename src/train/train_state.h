// train_state.json, the trainer's small state in a checkpoint (layout in checkpointing.h):
// steps, tokens, skipped steps, loss scale and data cursor. Parsed from text so that a
// hostile file can be checked without an engine (fuzz/train_state_fuzz.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "train/checkpointing.h"

namespace anvil {

struct TrainStateFile {
  TrainProgress progress;
  int64_t optimizer_step = 0;  // AdamW's step count: progress.step less skipped steps
};

// Parses the text of train_state.json at `path`; throws anvil::Error "[checkpoint] PATH: ..."
// for invalid JSON, a missing or mistyped field, or a count that is negative or out of range.
TrainStateFile parse_train_state(std::string_view text, const std::string& path);

}  // namespace anvil
