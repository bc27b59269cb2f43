// `anvil convert`: move a model between Hugging Face directories and anvil. Sources: a Hugging
// Face directory, an anvil checkpoint folder or a run directory (model_source.h). Targets:
//   --format hf     config.json, generation_config.json, safetensors in f32 or bf16 (sharded
//                   above --max-shard-size, like save_pretrained) and the tokenizer files;
//   --format anvil  the same directory in f32 as one model.safetensors, plus a config.toml whose
//                   [model] section describes the model and whose model.init_from points at the
//                   directory, so `anvil train --config <dir>/config.toml` fine-tunes from it.
// Weights are converted tensor by tensor without building a model. The output directory is
// written through a staging folder, so a failed conversion leaves nothing behind.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "cli/command.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"
#include "train/config.h"
#include "train/model_setup.h"

namespace anvil::cli {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  std::string from;
  std::string to;
  std::string format = "hf";
  std::string dtype;  // empty: bf16 for a bfloat16 source, else f32
  std::string max_shard_size = "5GB";
};

// Returns a tokenizer_config.json that transformers' PreTrainedTokenizerFast loads with BOS and
// EOS set. A tokenizer without BOS (an `anvil tokenizer train` one has only <|endoftext|>) uses
// its EOS for both, the GPT-2 convention.
std::string tokenizer_config_for(const fs::path& tokenizer_json, int max_seq_len) {
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_json.string());
  const std::optional<int32_t> bos = tokenizer->bos_id() ? tokenizer->bos_id() : tokenizer->eos_id();
  const std::optional<int32_t> eos = tokenizer->eos_id() ? tokenizer->eos_id() : tokenizer->bos_id();
  ANVIL_CHECK(bos.has_value() && eos.has_value(),
              "[convert] {}: the tokenizer has neither a BOS nor an EOS token, so no "
              "tokenizer_config.json can name them",
              tokenizer_json.string());
  const auto spelling = [&](int32_t id) { return tokenizer->decode(std::vector<int32_t>{id}); };
  const nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                 {"bos_token", spelling(*bos)},
                                 {"eos_token", spelling(*eos)},
                                 {"clean_up_tokenization_spaces", false},
                                 {"model_max_length", max_seq_len}};
  return config.dump(2) + "\n";
}

// Adds the source's tokenizer files (and generation_config.json of a Hugging Face source).
void add_tokenizer_files(const ModelSource& source, HfExportOptions& options) {
  if (source.kind == ModelSource::Kind::hf_dir &&
      fs::exists(source.dir / "generation_config.json")) {
    options.copy_files["generation_config.json"] = source.dir / "generation_config.json";
  }
  if (!source.tokenizer) return;
  const fs::path& tokenizer = *source.tokenizer;
  if (fs::is_directory(tokenizer)) {
    for (const std::string& name : hf_tokenizer_file_names()) {
      if (fs::exists(tokenizer / name)) options.copy_files[name] = tokenizer / name;
    }
  } else {
    const bool is_json = tokenizer.extension() == ".json";
    options.copy_files[is_json ? "tokenizer.json" : "tokenizer.model"] = tokenizer;
    const fs::path beside = tokenizer.parent_path() / "tokenizer_config.json";
    if (fs::exists(beside)) options.copy_files["tokenizer_config.json"] = beside;
  }
  if (options.copy_files.count("tokenizer.json") && !options.copy_files.count("tokenizer_config.json")) {
    options.extra_files["tokenizer_config.json"] =
        tokenizer_config_for(options.copy_files["tokenizer.json"], source.config.llama.max_seq_len);
  }
}

// Returns the config.toml of an anvil-format directory: [model] describes the model (llama3
// rope scaling included), model.init_from points at the directory.
std::string anvil_config_toml(const HfModelConfig& config, const fs::path& dir,
                              bool has_tokenizer) {
  const LlamaConfig& llama = config.llama;
  TrainConfig train;
  train.model = model_section_from(llama);
  ModelConfigSection& model = train.model;
  // [model] holds doubles: each float goes in as its shortest decimal spelling (1e-05 rather
  // than 9.99999974737875e-06), which reads back as the same float.
  for (double* value : {&model.rope_theta, &model.norm_eps, &model.rope_scaling_factor,
                        &model.rope_low_freq_factor, &model.rope_high_freq_factor}) {
    *value = std::stod(fmt::format("{}", static_cast<float>(*value)));
  }
  model.init_from = dir.string();
  if (has_tokenizer) train.data.tokenizer = (dir / "tokenizer.json").string();
  train.training.seq_len = std::min<int64_t>(train.training.seq_len, llama.max_seq_len);
  validate_config(train);
  return config_to_toml(train);
}

DType resolve_dtype(const ConvertOptions& o, const ModelSource& source) {
  if (o.format == "anvil") {
    ANVIL_CHECK(o.dtype.empty() || o.dtype == "f32",
                "[convert] --format anvil stores f32 master weights; drop --dtype {}", o.dtype);
    return DType::f32;
  }
  if (o.dtype.empty()) return source.config.torch_dtype == "bfloat16" ? DType::bf16 : DType::f32;
  ANVIL_CHECK(o.dtype == "f32" || o.dtype == "bf16",
              "[convert] --dtype must be f32 or bf16, got '{}'", o.dtype);
  return o.dtype == "f32" ? DType::f32 : DType::bf16;
}

int run_convert(const std::vector<std::string>& args) {
  CLI::App app("Convert a model between Hugging Face directories and anvil checkpoints.",
               "anvil convert");
  ConvertOptions o;
  app.add_option("--from", o.from, "Hugging Face directory, anvil checkpoint folder or run "
                                   "directory")
      ->required();
  app.add_option("--to", o.to, "output directory (must not exist, or be empty)")->required();
  app.add_option("--format", o.format, "hf: a Hugging Face directory; anvil: f32 weights plus "
                                       "a config.toml to train from")
      ->check(CLI::IsMember({"hf", "anvil"}))
      ->capture_default_str();
  app.add_option("--dtype", o.dtype, "f32 or bf16 (default: bf16 for a bfloat16 source, else "
                                     "f32)");
  app.add_option("--max-shard-size", o.max_shard_size,
                 "largest safetensors shard, e.g. 5GB, 500MB, 2GiB (--format hf)")
      ->capture_default_str();
  if (!parse_args(app, args)) return 0;

  const ModelSource source = resolve_model_source(o.from);
  HfExportOptions options;
  options.dtype = resolve_dtype(o, source);
  options.max_shard_bytes = o.format == "anvil" ? std::numeric_limits<uint64_t>::max()
                                                : parse_shard_size(o.max_shard_size);
  add_tokenizer_files(source, options);
  if (o.format == "anvil") {
    options.extra_files["config.toml"] =
        anvil_config_toml(source.config, fs::path(o.to).lexically_normal(),
                          options.copy_files.count("tokenizer.json") > 0);
  }
  const SafetensorsCollection tensors = open_model_tensors(source);
  save_hf_tensors(tensors, source.config, o.to, options);

  uint64_t weight_bytes = 0;
  int weight_files = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(o.to)) {
    if (entry.path().extension() != ".safetensors") continue;
    weight_bytes += entry.file_size();
    ++weight_files;
  }
  log_info("converted {} -> {} ({} format, {}, {} safetensors file{}, {:.1f} MB)",
           source.describe(), o.to, o.format, dtype_name(options.dtype), weight_files,
           weight_files == 1 ? "" : "s", static_cast<double>(weight_bytes) / 1e6);
  if (source.config.sliding_window) {
    log_info("note: sliding_window {} < max_position_embeddings {}: anvil uses a context of {} "
             "tokens for this model",
             *source.config.sliding_window, source.config.max_position_embeddings,
             source.config.llama.max_seq_len);
  }
  return 0;
}

}  // namespace

ANVIL_COMMAND("convert", "convert a model between Hugging Face format and anvil", 70,
              run_convert);

}  // namespace anvil::cli
