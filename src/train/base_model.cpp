// Base weights and base identity of fine-tuning runs (see base_model.h).
#include "train/base_model.h"

#include <fmt/format.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"
#include "model/hf_checkpoint.h"

namespace anvil {
namespace {

constexpr const char* kBaseRecordFile = "base_model.json";

}  // namespace

LoraOptions lora_options_from(const LoraConfigSection& lora) {
  LoraOptions options;
  options.r = static_cast<int>(lora.r);
  options.alpha = static_cast<float>(lora.alpha);
  options.dropout = static_cast<float>(lora.dropout);
  options.targets = lora.targets;
  return options;
}

namespace {

void load_base_tensors(const std::filesystem::path& dir, const LlamaConfig& config,
                       const ParameterLayout& layout,
                       const std::function<void(int, const float*)>& set_values) {
  const SafetensorsCollection tensors = open_hf_tensors(dir);
  check_hf_tensors(tensors, config);
  const std::vector<ParameterInfo>& infos = layout.params();
  std::vector<float> values;
  for (size_t i = 0; i < infos.size(); ++i) {
    values.resize(static_cast<size_t>(infos[i].numel()));
    tensors.at(infos[i].name).read_f32(values);
    set_values(static_cast<int>(i), values.data());
  }
}

}  // namespace

void load_base_weights(const std::filesystem::path& dir, LlamaModel& model) {
  ANVIL_CHECK(!model.options().tp.enabled(), "[finetune] {}: a tensor-parallel shard loads its "
              "base through the parallel engine", dir.string());
  load_base_tensors(dir, model.config(), model.parameters().layout(),
                    [&](int index, const float* values) { model.set_parameter(index, values); });
}

void load_base_weights(const std::filesystem::path& dir, DataParallelEngine& engine) {
  load_base_tensors(dir, engine.model().config(), engine.model().full_layout(),
                    [&](int index, const float* values) {
                      engine.set_frozen_weights(index, values);
                    });
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

}  // namespace anvil
