// Checkpoint files of a training run (layout in checkpointing.h). Tensors are copied to host
// memory only when the backend's memory is not the host's; on CPU backends the writer reads
// the parameter and moment buffers in place.
#include "train/checkpointing.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

namespace anvil {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "train_state.json";
constexpr const char* kConfigFile = "config.toml";

// Adds a tensor to a writer, staging a host copy when it lives on a device.
void add_tensor(SafetensorsWriter& writer, const std::string& name, const Tensor& tensor,
                Backend& backend) {
  if (tensor.device.is_cpu()) {
    writer.add(name, tensor);
    return;
  }
  std::vector<uint8_t> host(tensor.nbytes());
  backend.copy_to_host(host.data(), tensor);
  std::vector<int64_t> shape;
  for (int d = 0; d < tensor.shape.rank(); ++d) shape.push_back(tensor.shape[d]);
  writer.add_copy(name, safetensors_dtype_name(tensor.dtype), shape, host);
}

// Copies a safetensors entry into a same-shaped f32 tensor on the backend.
void read_into(const SafetensorsEntry& entry, const Tensor& dst, Backend& backend,
               const std::string& file) {
  std::vector<int64_t> expected;
  for (int d = 0; d < dst.shape.rank(); ++d) expected.push_back(dst.shape[d]);
  ANVIL_CHECK(entry.shape == expected, "[checkpoint] {}: tensor '{}' has shape {}, expected {}",
              file, entry.name, format_dims(entry.shape), format_dims(expected));
  if (entry.dtype == "F32") {
    backend.copy_from_host(dst, entry.data);
    return;
  }
  std::vector<float> values(static_cast<size_t>(entry.numel()));
  entry.read_f32(values);
  backend.copy_from_host(dst, values.data());
}

template <typename T>
T json_field(const nlohmann::json& json, const char* name, const std::string& file) {
  ANVIL_CHECK(json.is_object() && json.contains(name), "[checkpoint] {}: missing field '{}'", file,
              name);
  try {
    return json.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    ANVIL_FAIL("[checkpoint] {}: field '{}' has the wrong type", file, name);
  }
}

}  // namespace

void write_model_safetensors(LlamaModel& model, const std::filesystem::path& path) {
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  const ParameterSet& params = model.parameters();
  const auto& infos = params.layout().params();
  for (size_t i = 0; i < infos.size(); ++i) {
    add_tensor(writer, infos[i].name, params.tensor(static_cast<int>(i)), model.backend());
  }
  writer.write(path);
}

void read_model_safetensors(LlamaModel& model, const std::filesystem::path& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  const ParameterSet& params = model.parameters();
  const auto& infos = params.layout().params();
  for (size_t i = 0; i < infos.size(); ++i) {
    read_into(file.at(infos[i].name), params.tensor(static_cast<int>(i)), model.backend(),
              path.string());
  }
}

std::filesystem::path CheckpointStore::save(LlamaModel& model, const AdamW& optimizer,
                                            const TrainProgress& progress,
                                            const TrainConfig& config) {
  const std::filesystem::path staging = manager_.prepare(progress.step);
  write_model_safetensors(model, staging / kModelFile);

  SafetensorsWriter moments;
  moments.set_metadata("step", std::to_string(optimizer.step_count()));
  for (const NamedTensor& state : optimizer.state_tensors()) {
    add_tensor(moments, state.name, state.tensor, model.backend());
  }
  moments.write(staging / kOptimizerFile);

  // Every random choice of a run is a pure function of (seed, index): weight init of
  // (seed, name, element), data order of (seed, epoch). The seed is the whole RNG state.
  const nlohmann::json state = {{"step", progress.step},
                                {"optimizer_step", optimizer.step_count()},
                                {"scheduler_step", progress.step},
                                {"tokens_seen", progress.tokens_seen},
                                {"train_seconds", progress.train_seconds},
                                {"data_cursor", progress.cursor.to_json()},
                                {"rng", {{"seed", config.training.seed}}}};
  write_file_atomic(staging / kStateFile, state.dump(2) + "\n");
  write_file_atomic(staging / kConfigFile, config_to_toml(config));
  // config.json beside model.safetensors makes the folder loadable as a Hugging Face model.
  write_hf_config_json(staging / "config.json", hf_config_from_llama(model.config()), "float32");
  const LoadedCheckpoint committed =
      manager_.commit(progress.step, {{"tokens_seen", progress.tokens_seen}});
  return committed.dir;
}

std::optional<std::filesystem::path> CheckpointStore::latest_valid() const {
  const std::optional<LoadedCheckpoint> latest = manager_.find_latest_valid();
  if (!latest) return std::nullopt;
  return latest->dir;
}

std::optional<std::filesystem::path> select_resume_checkpoint(const std::string& resume,
                                                              const CheckpointStore& store) {
  if (resume == "never") return std::nullopt;
  if (resume == "auto") return store.latest_valid();
  return CheckpointManager::load(resume).dir;
}

TrainProgress load_checkpoint(const std::filesystem::path& dir, LlamaModel& model,
                              AdamW& optimizer) {
  read_model_safetensors(model, dir / kModelFile);

  const std::string optimizer_path = (dir / kOptimizerFile).string();
  const SafetensorsFile moments = SafetensorsFile::open(dir / kOptimizerFile);
  for (const NamedTensor& state : optimizer.state_tensors()) {
    read_into(moments.at(state.name), state.tensor, model.backend(), optimizer_path);
  }

  const std::string state_path = (dir / kStateFile).string();
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(read_file(dir / kStateFile));
  } catch (const nlohmann::json::exception& e) {
    ANVIL_FAIL("[checkpoint] {}: not valid JSON ({})", state_path, e.what());
  }
  TrainProgress progress;
  progress.step = json_field<int64_t>(state, "step", state_path);
  progress.tokens_seen = json_field<int64_t>(state, "tokens_seen", state_path);
  progress.train_seconds = json_field<double>(state, "train_seconds", state_path);
  progress.cursor =
      DataCursor::from_json(json_field<nlohmann::json>(state, "data_cursor", state_path));
  const auto optimizer_step = json_field<int64_t>(state, "optimizer_step", state_path);
  ANVIL_CHECK(optimizer_step == progress.step,
              "[checkpoint] {}: optimizer step {} differs from training step {}", state_path,
              optimizer_step, progress.step);
  optimizer.set_step_count(optimizer_step);
  return progress;
}

std::string read_checkpoint_config(const std::filesystem::path& dir) {
  return read_file(dir / kConfigFile);
}

}  // namespace anvil
