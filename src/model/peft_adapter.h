// PEFT LoRA adapter directories <-> a LlamaModel's adapters. A directory holds
// adapter_config.json (peft_type LORA, r, lora_alpha, lora_dropout, target_modules, ...) and
// adapter_model.safetensors whose tensors are named
// "base_model.model.model.layers.N.<self_attn|mlp>.<target>.lora_<A|B>.weight" with A (r, in)
// and B (out, r). Reading is strict: settings anvil cannot reproduce (DoRA, rsLoRA,
// fan_in_fan_out, trained biases, modules_to_save) and any missing, extra or misshapen tensor
// are one clear error naming the file. Writing stages both files and renames them into place.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "model/llama.h"
#include "model/lora.h"

namespace anvil {

struct PeftAdapterInfo {
  LoraOptions lora;
  std::string base_model_name_or_path;
};

// Reads adapter_config.json (unknown keys ignored; use_dora/use_rslora/fan_in_fan_out/bias!="none"/
// modules_to_save -> clear error) and returns its settings.
PeftAdapterInfo read_peft_adapter_config(const std::filesystem::path& dir);
// Parses the text of an adapter_config.json named `file` in messages (same rules as above).
PeftAdapterInfo parse_peft_adapter_config(std::string_view text, const std::string& file);
// Loads adapter_model.safetensors of `dir` into model.trainable() (model built with the same
// LoraOptions); checks every name/shape; F32/BF16/F16 accepted.
void load_peft_adapter(const std::filesystem::path& dir, LlamaModel& model);
// Writes adapter_config.json + adapter_model.safetensors (metadata format=pt) atomically.
void save_peft_adapter(const std::filesystem::path& dir, LlamaModel& model,
                       const std::string& base_model_name_or_path);

// The same two, for adapters that live elsewhere (a parallel layer's shards): `layout` is
// make_lora_layout's, and each adapter parameter (layout order) is handed over as host f32
// values through set_values(index, values) / filled by get_values(index, values). An empty
// set_values checks the folder (settings, names, shapes, dtypes) and reads no value.
void read_peft_adapter_weights(const std::filesystem::path& dir, const LoraOptions& lora,
                               const ParameterLayout& layout,
                               const std::function<void(int, const float*)>& set_values);
void write_peft_adapter(const std::filesystem::path& dir, const LoraOptions& lora,
                        const ParameterLayout& layout,
                        const std::function<void(int, float*)>& get_values,
                        const std::string& base_model_name_or_path);

}  // namespace anvil
