// Base weights, base identity and the memory breakdown of fine-tuning runs (see base_model.h).
#include "train/base_model.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"
#include "model/hf_checkpoint.h"

namespace anvil {
namespace {

constexpr const char* kBaseRecordFile = "base_model.json";

std::string mib(size_t bytes) {
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

LoraOptions lora_options_from(const LoraConfigSection& lora) {
  LoraOptions options;
  options.r = static_cast<int>(lora.r);
  options.alpha = static_cast<float>(lora.alpha);
  options.dropout = static_cast<float>(lora.dropout);
  options.targets = lora.targets;
  return options;
}

void load_base_weights(const std::filesystem::path& dir, LlamaModel& model) {
  const SafetensorsCollection tensors = open_hf_tensors(dir);
  check_hf_tensors(tensors, model.config());
  const std::vector<ParameterInfo>& infos = model.parameters().layout().params();
  std::vector<float> values;
  for (size_t i = 0; i < infos.size(); ++i) {
    values.resize(static_cast<size_t>(infos[i].numel()));
    tensors.at(infos[i].name).read_f32(values);
    model.set_parameter(static_cast<int>(i), values.data());
  }
}

std::string base_config_hash(const std::filesystem::path& dir) {
  const std::filesystem::path config = dir / "config.json";
  ANVIL_CHECK(std::filesystem::is_regular_file(config),
              "[finetune] {}: no config.json (expected a Hugging Face model directory)",
              dir.string());
  return hash_hex(xxhash64_file(config));
}

void write_base_record(const std::filesystem::path& checkpoint_dir,
                       const std::filesystem::path& base_dir) {
  const nlohmann::json record = {{"base_model_name_or_path", base_dir.string()},
                                 {"config_xxhash64", base_config_hash(base_dir)}};
  write_file_atomic(checkpoint_dir / kBaseRecordFile, record.dump(2) + "\n");
}

void check_base_record(const std::filesystem::path& checkpoint_dir,
                       const std::filesystem::path& base_dir) {
  const std::filesystem::path path = checkpoint_dir / kBaseRecordFile;
  std::string recorded_path, recorded_hash;
  try {
    const nlohmann::json record = nlohmann::json::parse(read_file(path));
    recorded_path = record.at("base_model_name_or_path").get<std::string>();
    recorded_hash = record.at("config_xxhash64").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    ANVIL_FAIL("[checkpoint] {}: not a base record ({})", path.string(), e.what());
  }
  const std::string current = base_config_hash(base_dir);
  ANVIL_CHECK(current == recorded_hash,
              "[checkpoint] {}: these adapters were trained on the base {} (config.json hash "
              "{}), but {} has config.json hash {}; use the same base model",
              checkpoint_dir.string(), recorded_path, recorded_hash, base_dir.string(), current);
}

std::string finetune_memory_table(const LlamaModel& model, int64_t optimizer_bytes) {
  const ModelMemory memory = model.memory();
  const size_t total = memory.base_weights + memory.trainable + memory.gradients +
                       static_cast<size_t>(optimizer_bytes) + memory.activations;
  const int64_t all_params = model.config().param_count();
  return fmt::format(
      "memory: base weights {} ({}) | {} parameters {} ({} trainable, {:.3f}% of {}) | "
      "gradients {} | optimizer state {} | activations {} | total {}",
      mib(memory.base_weights),
      model.lora_enabled() ? fmt::format("frozen, {}", dtype_name(model.options().compute_dtype))
                           : std::string("compute-dtype copies; the masters are trainable"),
      model.lora_enabled() ? "LoRA" : "trainable", mib(memory.trainable), memory.trainable_count,
      100.0 * static_cast<double>(memory.trainable_count) / static_cast<double>(all_params),
      all_params, mib(memory.gradients), mib(static_cast<size_t>(optimizer_bytes)),
      mib(memory.activations), mib(total));
}

}  // namespace anvil
