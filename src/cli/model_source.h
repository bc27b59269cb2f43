// The model a command names with --model / --from: a Hugging Face directory (config.json plus
// safetensors; an `anvil convert --format anvil` directory is one too), an anvil checkpoint
// folder (manifest.json marks it; verified, read through its config.toml, which also names the
// tokenizer), or a run directory (its newest valid checkpoint). A LoRA run's checkpoint is
// its base model directory plus the checkpoint's PEFT adapter. Shared by `anvil convert`,
// `anvil eval` and `anvil generate` so they accept exactly the same sources and describe them
// the same way.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "io/safetensors_collection.h"
#include "model/hf_checkpoint.h"

namespace anvil::cli {

struct ModelSource {
  enum class Kind { hf_dir, anvil_checkpoint };
  Kind kind = Kind::hf_dir;
  std::filesystem::path dir;  // the Hugging Face directory or the checkpoint folder
  HfModelConfig config;       // a checkpoint's is built from its config.toml
  // The tokenizer the model was trained with (file or directory), when it can be found.
  std::optional<std::filesystem::path> tokenizer;
  // A PEFT adapter folder applied on top of the weights (a LoRA run's checkpoint resolves to
  // its base directory plus this; `anvil generate --adapter` sets it too).
  std::optional<std::filesystem::path> adapter;
  // The attention masks the model was trained with (a run's [attention] section; dense for a
  // Hugging Face directory, whose config.json has no such setting).
  AttentionSchedule attention;

  // Returns e.g. "Hugging Face directory m/ (LlamaForCausalLM)" for messages.
  std::string describe() const;
};

// Resolves a path to a model source; throws naming the path and what was expected.
ModelSource resolve_model_source(const std::filesystem::path& path);

// Opens the source's weights (model.safetensors, or the shards of an index); throws for a
// source with an adapter (its weights are base + adapter: `anvil export --merge` first).
SafetensorsCollection open_model_tensors(const ModelSource& source);

// Builds the model and loads its weights (checked as in check_hf_tensors), then the adapter
// when the source has one (options.lora is taken from the adapter's adapter_config.json).
// options.attention is replaced by the source's.
std::unique_ptr<LlamaModel> load_source_model(const ModelSource& source, Backend& backend,
                                              const ModelOptions& options);

}  // namespace anvil::cli
