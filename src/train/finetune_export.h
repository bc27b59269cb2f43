// `anvil export`: turn a checkpoint of a fine-tuning run into files the Hugging Face
// ecosystem loads. A LoRA checkpoint becomes a PEFT adapter folder (adapter_config.json +
// adapter_model.safetensors, base_model_name_or_path = the base model folder), or with merge a
// full Hugging Face model whose matrices are W + (alpha / r) B A; a full fine-tune (or any
// ordinary training run) becomes a Hugging Face model. Model exports copy the base's tokenizer
// files. The output folder is written through a staging sibling and renamed into place, so a
// failed export leaves nothing behind.
#pragma once

#include <filesystem>
#include <string>

#include "core/dtype.h"

namespace anvil {

struct ExportRequest {
  std::filesystem::path run_dir;     // the run's newest valid checkpoint, unless checkpoint is set
  std::filesystem::path checkpoint;  // a checkpoint folder (optional)
  std::filesystem::path out;
  bool merge = false;        // LoRA: fold the adapters into the base and write a full model
  DType dtype = DType::f32;  // of a written model (adapters are always f32)
};

// Writes the export; returns a one-line description of what was written. Throws one clear
// line (and writes nothing) on a bad request.
std::string export_run(const ExportRequest& request);

// Copies a LoRA checkpoint's PEFT adapter files into a new folder `out` (atomically).
void copy_peft_adapter(const std::filesystem::path& checkpoint, const std::filesystem::path& out);

}  // namespace anvil
