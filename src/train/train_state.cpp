// Parsing of train_state.json (see train_state.h). Every count is checked to fit its field and
// to be non-negative, so a hostile file is one error line, never a wrapped step number.
#include "train/train_state.h"

#include <fmt/format.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_util.h"

namespace anvil {
namespace {

// train_state.json is flat apart from the mesh, the loss-scale and the cursor objects (a
// mixture's cursor holds a list of source objects).
constexpr int kMaxStateDepth = 6;

const nlohmann::json& state_field(const nlohmann::json& json, const char* name,
                                  const std::string& path) {
  ANVIL_CHECK(json.is_object() && json.contains(name), "[checkpoint] {}: missing field '{}'", path,
              name);
  return json.at(name);
}

int64_t count_field(const nlohmann::json& json, const char* name, const std::string& path) {
  return json_signed(state_field(json, name, path),
                     fmt::format("[checkpoint] {}: '{}'", path, name), 0,
                     std::numeric_limits<int64_t>::max());
}

double number_field(const nlohmann::json& json, const char* name, const std::string& path) {
  const nlohmann::json& value = state_field(json, name, path);
  ANVIL_CHECK(value.is_number(), "[checkpoint] {}: field '{}' has the wrong type", path, name);
  return value.get<double>();
}

}  // namespace

TrainStateFile parse_train_state(std::string_view text, const std::string& path) {
  const nlohmann::json state = parse_json_strict(text, "[checkpoint] " + path, kMaxStateDepth);
  TrainStateFile file;
  TrainProgress& progress = file.progress;
  progress.step = count_field(state, "step", path);
  progress.tokens_seen = count_field(state, "tokens_seen", path);
  progress.train_seconds = number_field(state, "train_seconds", path);
  try {
    progress.cursor = DataCursor::from_json(state_field(state, "data_cursor", path));
  } catch (const Error& e) {
    ANVIL_FAIL("[checkpoint] {}: {}", path, e.what());
  }
  // Written since training.skip_nonfinite exists; older checkpoints skipped nothing.
  if (state.contains("skipped_steps")) {
    progress.skipped_steps = count_field(state, "skipped_steps", path);
    progress.consecutive_skipped = count_field(state, "consecutive_skipped_steps", path);
    ANVIL_CHECK(progress.skipped_steps <= progress.step,
                "[checkpoint] {}: {} skipped steps exceed the {} steps taken", path,
                progress.skipped_steps, progress.step);
  }
  if (state.contains("loss_scale")) {
    const nlohmann::json& scaler = state_field(state, "loss_scale", path);
    progress.loss_scale =
        LossScalerState{number_field(scaler, "scale", path),
                        count_field(scaler, "clean_steps", path)};
  }
  // The world that wrote the checkpoint (elastic launches log a change); older ones lack it.
  if (state.contains("mesh") && state["mesh"].is_object() && state["mesh"].contains("world")) {
    progress.saved_world = static_cast<int>(
        json_signed(state["mesh"]["world"], fmt::format("[checkpoint] {}: 'mesh.world'", path), 1,
                    std::numeric_limits<int>::max()));
  }
  file.optimizer_step = count_field(state, "optimizer_step", path);
  return file;
}

}  // namespace anvil
