// PEFT adapter directories: adapter_config.json writing (peft_config.cpp reads it) and the
// tensor exchange between adapter_model.safetensors and a model's trainable() adapter set. PEFT
// prefixes every tensor with "base_model.model." (the PeftModel wrapper around
// LlamaForCausalLM).
#include "model/peft_adapter.h"

#include <algorithm>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "io/safetensors_header.h"

namespace anvil {

namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigName = "adapter_config.json";
constexpr const char* kWeightsName = "adapter_model.safetensors";
constexpr const char* kPeftPrefix = "base_model.model.";

std::vector<int64_t> dims_of(const Shape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.rank(); ++i) dims.push_back(shape[i]);
  return dims;
}

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

void load_peft_adapter(const fs::path& dir, LlamaModel& model) {
  ANVIL_CHECK(model.lora_enabled(), "[peft] {}: the model was built without LoRA adapters",
              dir.string());
  ParameterSet& set = model.trainable();
  read_peft_adapter_weights(dir, model.options().lora, set.layout(),
                            [&](int index, const float* values) {
                              model.backend().copy_from_host(set.tensor(index), values);
                            });
}

void read_peft_adapter_weights(const fs::path& dir, const LoraOptions& mine,
                               const ParameterLayout& layout,
                               const std::function<void(int, const float*)>& set_values) {
  const PeftAdapterInfo info = read_peft_adapter_config(dir);
  const fs::path config_file = dir / kConfigName;
  ANVIL_CHECK(info.lora.r == mine.r, "[peft] {}: r = {} but the model's adapters have r = {}",
              config_file.string(), info.lora.r, mine.r);
  ANVIL_CHECK(info.lora.alpha == mine.alpha,
              "[peft] {}: lora_alpha = {} but the model's adapters have alpha = {}",
              config_file.string(), info.lora.alpha, mine.alpha);
  ANVIL_CHECK(sorted(info.lora.targets) == sorted(mine.targets),
              "[peft] {}: target_modules [{}] differ from the model's [{}]", config_file.string(),
              join(sorted(info.lora.targets)), join(sorted(mine.targets)));

  const fs::path weights_file = dir / kWeightsName;
  ANVIL_CHECK(fs::exists(weights_file), "[peft] {}: adapter weights not found",
              weights_file.string());
  const SafetensorsFile file = SafetensorsFile::open(weights_file);
  const std::vector<ParameterInfo>& params = layout.params();
  std::set<std::string> expected;
  for (const ParameterInfo& p : params) expected.insert(kPeftPrefix + p.name);
  for (const SafetensorsEntry& entry : file.entries()) {
    ANVIL_CHECK(expected.count(entry.name) == 1,
                "[peft] {}: unexpected tensor '{}' (not an adapter of this model)",
                weights_file.string(), entry.name);
  }
  std::vector<float> host;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string name = kPeftPrefix + params[i].name;
    const SafetensorsEntry* entry = file.find(name);
    ANVIL_CHECK(entry != nullptr, "[peft] {}: missing tensor '{}'", weights_file.string(), name);
    const std::vector<int64_t> shape = dims_of(params[i].shape);
    ANVIL_CHECK(entry->shape == shape, "[peft] {}: tensor '{}' has shape {}, expected {}",
                weights_file.string(), name, format_dims(entry->shape), format_dims(shape));
    ANVIL_CHECK(entry->dtype == "F32" || entry->dtype == "BF16" || entry->dtype == "F16",
                "[peft] {}: tensor '{}' has dtype {} (expected F32, BF16 or F16)",
                weights_file.string(), name, entry->dtype);
    if (!set_values) continue;  // checking only
    host.resize(static_cast<size_t>(params[i].numel()));
    entry->read_f32(host);
    set_values(static_cast<int>(i), host.data());
  }
}

void save_peft_adapter(const fs::path& dir, LlamaModel& model,
                       const std::string& base_model_name_or_path) {
  ANVIL_CHECK(model.lora_enabled(), "[peft] {}: the model has no LoRA adapters to save",
              dir.string());
  const ParameterSet& set = model.trainable();
  write_peft_adapter(
      dir, model.options().lora, set.layout(),
      [&](int index, float* values) { model.backend().copy_to_host(values, set.tensor(index)); },
      base_model_name_or_path);
}

void write_peft_adapter(const fs::path& dir, const LoraOptions& lora,
                        const ParameterLayout& layout,
                        const std::function<void(int, float*)>& get_values,
                        const std::string& base_model_name_or_path) {
  std::error_code error;
  fs::create_directories(dir, error);
  ANVIL_CHECK(!error, "[peft] {}: cannot create directory ({})", dir.string(), error.message());

  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  const std::vector<ParameterInfo>& params = layout.params();
  std::vector<float> host;
  for (size_t i = 0; i < params.size(); ++i) {
    host.resize(static_cast<size_t>(params[i].numel()));
    get_values(static_cast<int>(i), host.data());
    const std::vector<int64_t> shape = dims_of(params[i].shape);
    writer.add_copy(kPeftPrefix + params[i].name, "F32", shape,
                    {reinterpret_cast<const uint8_t*>(host.data()), host.size() * sizeof(float)});
  }

  nlohmann::json config = {
      {"alpha_pattern", nlohmann::json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path", base_model_name_or_path},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", lora.r},
      {"rank_pattern", nlohmann::json::object()},
      {"revision", nullptr},
      {"target_modules", lora.targets},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", false},
      {"use_rslora", false},
  };
  // Weights first: a reader never sees a new config next to old weights of another shape.
  writer.write(dir / kWeightsName);
  write_file_atomic(dir / kConfigName, config.dump(2) + "\n");
}

}  // namespace anvil
