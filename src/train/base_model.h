// The base model of a fine-tuning run: the Hugging Face directory (or anvil checkpoint folder
// with a config.json) named by model.init_from, its weights loaded into a model whatever way
// the model stores them (f32 masters, or the bf16-only frozen base of a LoRA bf16 model), its
// identity (a hash of its config.json, recorded in LoRA checkpoints so a resume or export
// against a different base is refused), and the start-of-run memory breakdown.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/llama.h"
#include "model/lora.h"
#include "train/config.h"

namespace anvil {

// Returns the adapter settings of the [lora] section (disabled when lora.r is 0).
LoraOptions lora_options_from(const LoraConfigSection& lora);

// Loads every base parameter of `model` from the safetensors of `dir` (checked against the
// model's architecture first; F32/BF16/F16 widened exactly).
void load_base_weights(const std::filesystem::path& dir, LlamaModel& model);

// Returns the identity of a base model folder: the xxhash64 (hex) of its config.json bytes.
std::string base_config_hash(const std::filesystem::path& dir);

// Writes base_model.json (path and config hash of the base) into a LoRA checkpoint folder.
void write_base_record(const std::filesystem::path& checkpoint_dir,
                       const std::filesystem::path& base_dir);
// Throws unless the base recorded in a LoRA checkpoint folder has the config of `base_dir`.
void check_base_record(const std::filesystem::path& checkpoint_dir,
                       const std::filesystem::path& base_dir);

// Returns the memory breakdown printed at the start of a run: base weights, trainable
// (LoRA or full) parameters, their gradients, the optimizer state and activations.
std::string finetune_memory_table(const LlamaModel& model, int64_t optimizer_bytes);

}  // namespace anvil
