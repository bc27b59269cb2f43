// Reading of a PEFT adapter_config.json (see peft_adapter.h). Numbers are range-checked before
// they are narrowed into LoraOptions, so a hostile file is one error line, never a wrapped rank.
#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file_util.h"
#include "io/json_util.h"
#include "model/peft_adapter.h"

namespace anvil {

namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigName = "adapter_config.json";
// adapter_config.json is flat apart from a few small lists and maps.
constexpr int kMaxConfigDepth = 16;

// Returns whether a JSON value is absent in effect: null, false, an empty string/array/object.
bool is_unset(const nlohmann::json& value) {
  if (value.is_null()) return true;
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_string() || value.is_array() || value.is_object()) return value.empty();
  return false;
}

// Throws naming `file` when config key `key` is set: anvil cannot reproduce that feature.
void reject_if_set(const nlohmann::json& config, const char* key, const char* feature,
                   const std::string& file) {
  if (config.contains(key) && !is_unset(config[key]))
    ANVIL_FAIL("[peft] {}: {} ({} = {}) is not supported", file, feature, key,
               quote_for_message(config[key].dump()));
}

// Returns string setting `key`, or `fallback` when it is absent or null.
std::string string_setting(const nlohmann::json& config, const char* key, const char* fallback,
                           const std::string& file) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  ANVIL_CHECK(config[key].is_string(), "[peft] {}: '{}' must be a string, got {}", file, key,
              quote_for_message(config[key].dump()));
  return config[key].get<std::string>();
}

// Returns number setting `key` as a float, or `fallback` when it is absent.
float float_setting(const nlohmann::json& config, const char* key, float fallback,
                    const std::string& file) {
  if (!config.contains(key)) return fallback;
  const nlohmann::json& value = config[key];
  ANVIL_CHECK(value.is_number(), "[peft] {}: '{}' must be a number, got {}", file, key,
              quote_for_message(value.dump()));
  const double number = value.get<double>();
  ANVIL_CHECK(std::fabs(number) <= std::numeric_limits<float>::max(),
              "[peft] {}: '{}' is out of range: {}", file, key, value.dump());
  return static_cast<float>(number);
}

}  // namespace

PeftAdapterInfo parse_peft_adapter_config(std::string_view text, const std::string& file) {
  const nlohmann::json config = parse_json_strict(text, "[peft] " + file, kMaxConfigDepth);
  ANVIL_CHECK(config.is_object(), "[peft] {}: expected a JSON object", file);
  const std::string peft_type = string_setting(config, "peft_type", "LORA", file);
  ANVIL_CHECK(peft_type == "LORA", "[peft] {}: peft_type '{}' is not supported (only LORA)", file,
              quote_for_message(peft_type));
  reject_if_set(config, "use_dora", "DoRA", file);
  reject_if_set(config, "use_rslora", "rank-stabilised LoRA", file);
  reject_if_set(config, "fan_in_fan_out", "fan_in_fan_out (Conv1D-style weights)", file);
  reject_if_set(config, "modules_to_save", "modules_to_save (fully trained extra modules)", file);
  reject_if_set(config, "rank_pattern", "per-module ranks", file);
  reject_if_set(config, "alpha_pattern", "per-module alphas", file);
  reject_if_set(config, "layers_to_transform", "adapting only some layers", file);
  reject_if_set(config, "layer_replication", "layer replication", file);
  reject_if_set(config, "exclude_modules", "excluded modules", file);
  reject_if_set(config, "target_parameters", "adapters on raw parameters", file);
  reject_if_set(config, "lora_bias", "a bias on lora_B", file);
  const std::string bias = string_setting(config, "bias", "none", file);
  ANVIL_CHECK(bias == "none", "[peft] {}: bias '{}' is not supported (only \"none\")", file,
              quote_for_message(bias));

  PeftAdapterInfo info;
  // Missing keys take LoraConfig's defaults (r 8, alpha 8, dropout 0, Llama: q/v_proj).
  info.lora.r =
      config.contains("r") ? json_integer<int>(config["r"], "[peft] " + file + ": 'r'") : 8;
  info.lora.alpha = float_setting(config, "lora_alpha", 8.0f, file);
  info.lora.dropout = float_setting(config, "lora_dropout", 0.0f, file);
  const nlohmann::json targets = config.value("target_modules", nlohmann::json());
  if (targets.is_null()) {
    info.lora.targets = {"q_proj", "v_proj"};
  } else if (targets.is_string()) {
    const std::string pattern = targets.get<std::string>();
    ANVIL_CHECK(pattern == "all-linear",
                "[peft] {}: target_modules as a pattern ('{}') is not supported; list the "
                "module names",
                file, quote_for_message(pattern));
    info.lora.targets.assign(lora_target_names().begin(), lora_target_names().end());
  } else {
    ANVIL_CHECK(targets.is_array(), "[peft] {}: 'target_modules' must be a list of names", file);
    for (const nlohmann::json& target : targets) {
      ANVIL_CHECK(target.is_string(), "[peft] {}: 'target_modules' must be a list of names, got {}",
                  file, quote_for_message(target.dump()));
      info.lora.targets.push_back(target.get<std::string>());
    }
  }
  if (config.contains("base_model_name_or_path") && config["base_model_name_or_path"].is_string())
    info.base_model_name_or_path = config["base_model_name_or_path"].get<std::string>();
  // Keep PEFT's set semantics but anvil's canonical order.
  std::vector<std::string> ordered;
  for (const std::string& name : lora_target_names()) {
    if (std::find(info.lora.targets.begin(), info.lora.targets.end(), name) !=
        info.lora.targets.end())
      ordered.push_back(name);
  }
  try {
    validate_lora_options(info.lora);
  } catch (const Error& e) {
    ANVIL_FAIL("[peft] {}: {}", file, e.what());
  }
  info.lora.targets = ordered;
  return info;
}

PeftAdapterInfo read_peft_adapter_config(const fs::path& dir) {
  const fs::path file = dir / kConfigName;
  ANVIL_CHECK(fs::exists(file), "[peft] {}: adapter config not found", file.string());
  return parse_peft_adapter_config(read_file(file), file.string());
}

}  // namespace anvil
