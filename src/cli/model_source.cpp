// Model source resolution (see model_source.h). A checkpoint's architecture comes from the
// [model] section of its config.toml; its token ids for generation_config.json come from the
// tokenizer of its data when that can be found (a missing tokenizer is not an error here: the
// weights alone still convert).
#include "cli/model_source.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "model/peft_adapter.h"
#include "tokenizer/tokenizer.h"
#include "train/base_model.h"
#include "train/model_setup.h"
#include "train/run_artifacts.h"

namespace anvil::cli {
namespace {

namespace fs = std::filesystem;

bool has_tokenizer_file(const fs::path& dir) {
  return fs::exists(dir / "tokenizer.json") || fs::exists(dir / "tokenizer.model");
}

// A LoRA checkpoint: the base directory (model.init_from, checked against the recorded
// config hash) with the checkpoint as adapter.
ModelSource lora_checkpoint_source(const RunCheckpoint& checkpoint) {
  const fs::path base = checkpoint.config.model.init_from;
  check_base_record(checkpoint.dir, base);
  ModelSource source;
  source.dir = base;
  source.config = read_hf_config(base);
  if (has_tokenizer_file(base)) source.tokenizer = base;
  source.adapter = checkpoint.dir;
  source.attention = attention_schedule_from(checkpoint.config.attention);
  return source;
}

ModelSource checkpoint_source(const RunCheckpoint& checkpoint) {
  if (checkpoint.config.lora.r > 0) return lora_checkpoint_source(checkpoint);
  ModelSource source;
  source.kind = ModelSource::Kind::anvil_checkpoint;
  source.dir = checkpoint.dir;
  source.attention = attention_schedule_from(checkpoint.config.attention);
  const LlamaConfig llama = llama_config_from(checkpoint.config.model);
  try {
    source.config = hf_config_from_llama(llama);
  } catch (const Error& e) {
    ANVIL_FAIL("[model] {}: config.toml: {}", checkpoint.dir.string(), e.what());
  }
  try {
    const fs::path tokenizer_path = run_tokenizer_path(checkpoint.config);
    const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_path.string());
    source.tokenizer = tokenizer_path;
    source.config.bos_token_id = tokenizer->bos_id();
    if (tokenizer->eos_id()) source.config.eos_token_ids = {*tokenizer->eos_id()};
  } catch (const Error& e) {
    log_warn("{}: no tokenizer found for this checkpoint ({})", checkpoint.dir.string(),
             e.what());
  }
  return source;
}

}  // namespace

std::string ModelSource::describe() const {
  const std::string with_adapter =
      adapter ? fmt::format(" with the LoRA adapter {}", adapter->string()) : std::string();
  if (kind == Kind::hf_dir) {
    return fmt::format("Hugging Face directory {} ({}){}", dir.string(), config.architecture,
                       with_adapter);
  }
  return fmt::format("anvil checkpoint {}{}", dir.string(), with_adapter);
}

ModelSource resolve_model_source(const fs::path& path) {
  ANVIL_CHECK(fs::is_directory(path), "[model] {}: no such directory (expected a Hugging Face "
              "model directory, an anvil checkpoint or a run directory)",
              path.string());
  // A checkpoint carries a config.json too; its manifest marks it (and leads to its tokenizer).
  if (fs::exists(path / "manifest.json")) return checkpoint_source(open_checkpoint(path));
  if (fs::exists(path / "config.json")) {
    ModelSource source;
    source.dir = path;
    source.config = read_hf_config(path);
    if (has_tokenizer_file(path)) source.tokenizer = path;
    return source;
  }
  if (fs::is_directory(path / "checkpoints")) return checkpoint_source(find_run_checkpoint(path));
  ANVIL_FAIL("[model] {}: not a Hugging Face model directory (no config.json), an anvil "
             "checkpoint (no manifest.json) or a run directory (no checkpoints/)",
             path.string());
}

SafetensorsCollection open_model_tensors(const ModelSource& source) {
  ANVIL_CHECK(!source.adapter.has_value(),
              "[model] {} is a LoRA adapter on {}; write a full model with: anvil export "
              "--checkpoint {} --merge --out DIR",
              source.adapter->string(), source.dir.string(), source.adapter->string());
  if (source.kind == ModelSource::Kind::anvil_checkpoint) {
    return SafetensorsCollection::open(source.dir / kSafetensorsSingleName);
  }
  return open_hf_tensors(source.dir);
}

std::unique_ptr<LlamaModel> load_source_model(const ModelSource& source, Backend& backend,
                                              const ModelOptions& requested) {
  ModelOptions options = requested;
  options.attention = source.attention;
  if (source.adapter) {
    ModelOptions adapted = options;
    adapted.lora = read_peft_adapter_config(*source.adapter).lora;
    adapted.lora.dropout = 0.0f;  // inference only
    auto model = std::make_unique<LlamaModel>(source.config.llama, backend, adapted);
    load_base_weights(source.dir, *model);
    load_peft_adapter(*source.adapter, *model);
    return model;
  }
  if (source.kind == ModelSource::Kind::hf_dir) return load_hf_model(source.dir, backend, options);
  const SafetensorsCollection tensors = open_model_tensors(source);
  check_hf_tensors(tensors, source.config.llama);
  auto model = std::make_unique<LlamaModel>(source.config.llama, backend, options);
  load_hf_weights(tensors, *model);
  return model;
}

}  // namespace anvil::cli
