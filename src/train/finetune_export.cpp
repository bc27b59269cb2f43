// Exports of fine-tuning runs (see finetune_export.h). The merge builds the f32 base with the
// run's adapters on the cpu backend, loads both, folds the adapters in with
// LlamaModel::merge_lora and writes the base layout only, so the result is a plain model.
#include "train/finetune_export.h"

#include <fmt/format.h>

#include <map>

#include "backend/backend.h"
#include "core/error.h"
#include "io/safetensors_collection.h"
#include "model/hf_checkpoint.h"
#include "model/peft_adapter.h"
#include "train/base_model.h"
#include "train/model_setup.h"
#include "train/run_artifacts.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

constexpr const char* kAdapterFiles[] = {"adapter_config.json", "adapter_model.safetensors"};

// Returns the tokenizer and generation files of `base` to copy into a model export.
std::map<std::string, fs::path> base_side_files(const fs::path& base) {
  std::map<std::string, fs::path> files;
  if (base.empty()) return files;
  for (const std::string& name : hf_tokenizer_file_names()) {
    if (fs::exists(base / name)) files[name] = base / name;
  }
  if (fs::exists(base / "generation_config.json")) {
    files["generation_config.json"] = base / "generation_config.json";
  }
  return files;
}

// Returns the Hugging Face config to write: the base's (architecture, token ids) when the run
// started from a Hugging Face folder with the same architecture, else one built from [model].
HfModelConfig export_hf_config(const TrainConfig& config) {
  const LlamaConfig llama = llama_config_from(config.model);
  const fs::path base = config.model.init_from;
  if (!base.empty() && fs::exists(base / "config.json")) {
    HfModelConfig hf = read_hf_config(base);
    if (hf.llama.summary() == llama.summary()) return hf;
  }
  return hf_config_from_llama(llama);
}

std::string merge_lora_export(const RunCheckpoint& run, const ExportRequest& request) {
  const fs::path base = run.config.model.init_from;
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  ModelOptions options;
  options.max_batch = 1;
  options.max_seq = 1;  // no forward pass runs: the smallest activation arena
  options.lora = lora_options_from(run.config.lora);
  LlamaModel model(llama_config_from(run.config.model), *backend, options);
  load_base_weights(base, model);
  load_peft_adapter(run.dir, model);
  model.merge_lora();
  HfExportOptions export_options;
  export_options.dtype = request.dtype;
  export_options.copy_files = base_side_files(base);
  save_hf_model(model, export_hf_config(run.config), request.out, export_options);
  return fmt::format(
      "merged the LoRA adapters of {} into {} and wrote a {} Hugging Face model "
      "to {}",
      run.dir.string(), base.string(), dtype_name(request.dtype), request.out.string());
}

}  // namespace

void copy_peft_adapter(const fs::path& checkpoint, const fs::path& out) {
  write_directory_atomically(out, [&](const fs::path& staging) {
    for (const char* name : kAdapterFiles) {
      std::error_code error;
      fs::copy_file(checkpoint / name, staging / name, error);
      ANVIL_CHECK(!error, "[export] cannot copy {} to {}: {}", (checkpoint / name).string(),
                  (staging / name).string(), error.message());
    }
  });
}

std::string export_run(const ExportRequest& request) {
  ANVIL_CHECK(!request.out.empty(), "[export] --out DIR is required");
  ANVIL_CHECK(request.dtype == DType::f32 || request.dtype == DType::bf16,
              "[export] --dtype must be f32 or bf16");
  ANVIL_CHECK(!request.run_dir.empty() || !request.checkpoint.empty(),
              "[export] pass --run DIR (its newest checkpoint) or --checkpoint DIR");
  const RunCheckpoint run = request.checkpoint.empty() ? find_run_checkpoint(request.run_dir)
                                                       : open_checkpoint(request.checkpoint);
  ANVIL_CHECK(!std::filesystem::exists(request.out) ||
                  (fs::is_directory(request.out) && fs::is_empty(request.out)),
              "[export] {}: already exists and is not an empty directory; choose a new one",
              request.out.string());
  if (run.config.lora.r > 0) {
    const fs::path base = run.config.model.init_from;
    check_base_record(run.dir, base);
    if (request.merge) return merge_lora_export(run, request);
    ANVIL_CHECK(request.dtype == DType::f32,
                "[export] a LoRA adapter is written in f32; --dtype bf16 applies to --merge "
                "(a full model)");
    copy_peft_adapter(run.dir, request.out);
    return fmt::format("wrote the PEFT adapter of {} (base {}) to {}", run.dir.string(),
                       base.string(), request.out.string());
  }
  ANVIL_CHECK(!request.merge,
              "[export] --merge folds LoRA adapters into their base, but {} is a full "
              "fine-tune (lora.r = 0): export it without --merge",
              run.dir.string());
  const SafetensorsCollection tensors =
      SafetensorsCollection::open(run.dir / kSafetensorsSingleName);
  const HfModelConfig hf = export_hf_config(run.config);
  check_hf_tensors(tensors, hf.llama);
  HfExportOptions export_options;
  export_options.dtype = request.dtype;
  export_options.copy_files = base_side_files(run.config.model.init_from);
  save_hf_tensors(tensors, hf, request.out, export_options);
  return fmt::format("wrote the {} Hugging Face model of {} to {}", dtype_name(request.dtype),
                     run.dir.string(), request.out.string());
}

}  // namespace anvil
