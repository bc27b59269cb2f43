// The base model of a fine-tuning run: the Hugging Face directory (or anvil checkpoint folder
// with a config.json) named by model.init_from, its weights loaded into a model or a parallel
// engine whatever way they are held (f32 or bf16, whole or as this rank's ZeRO-3 shards), and
// its identity (a hash of its config.json, recorded in LoRA checkpoints so a resume or export
// against a different base is refused).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/llama.h"
#include "model/lora.h"
#include "parallel/engine.h"
#include "train/config.h"

namespace anvil {

// Returns the adapter settings of the [lora] section (disabled when lora.r is 0).
LoraOptions lora_options_from(const LoraConfigSection& lora);

// Loads every base parameter of `model` from the safetensors of `dir` (checked against the
// model's architecture first; F32/BF16/F16 widened exactly).
void load_base_weights(const std::filesystem::path& dir, LlamaModel& model);
// The same into the frozen base an engine holds (each rank the part it holds).
void load_base_weights(const std::filesystem::path& dir, DataParallelEngine& engine);

// Returns the identity of a base model folder: the xxhash64 (hex) of its config.json bytes.
std::string base_config_hash(const std::filesystem::path& dir);

// Writes base_model.json (path and config hash of the base) into a LoRA checkpoint folder.
void write_base_record(const std::filesystem::path& checkpoint_dir,
                       const std::filesystem::path& base_dir);
// Throws unless the base recorded in a LoRA checkpoint folder has the config of `base_dir`.
void check_base_record(const std::filesystem::path& checkpoint_dir,
                       const std::filesystem::path& base_dir);

}  // namespace anvil
