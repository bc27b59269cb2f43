// Building the configuration of `anvil finetune` (see finetune.h). Which keys the user set is
// tracked explicitly (flags by name, the config file by probing it over sentinel values), so
// derived defaults (steps from epochs, warmup, sequence length capped by the model, evaluation
// only when a validation split exists) never override a value someone chose.
#include "train/finetune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "core/log.h"
#include "data/dataloader.h"
#include "data/sft.h"
#include "model/hf_config.h"
#include "model/parameter_table.h"
#include "model/peft_adapter.h"
#include "tokenizer/tokenizer.h"
#include "train/base_model.h"
#include "train/data_sources.h"
#include "train/model_setup.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

// Fraction of the steps spent in linear warmup when optimizer.warmup_steps is not set.
constexpr double kWarmupFraction = 0.03;
// Longest default training window; shorter when the model's context is.
constexpr int64_t kDefaultSeqLen = 512;
// Validation share of the examples when JSONL is prepared (the rest trains; no test split).
constexpr double kValidationShare = 0.05;

// The keys a request sets itself, by flag or in its config file.
class ExplicitKeys {
 public:
  ExplicitKeys(const FinetuneRequest& request) : request_(request) {
    if (request.config_path.empty()) return;
    // A key the file sets replaces the sentinel; only the keys probed here matter.
    TrainConfig probe;
    probe.training.steps = -1;
    probe.training.seq_len = -1;
    probe.training.eval_steps = -1;
    probe.optimizer.warmup_steps = -1;
    probe.lora.r = -1;
    apply_config_file(probe, request.config_path);
    if (probe.training.steps != -1) in_file_.push_back("training.steps");
    if (probe.training.seq_len != -1) in_file_.push_back("training.seq_len");
    if (probe.training.eval_steps != -1) in_file_.push_back("training.eval_steps");
    if (probe.optimizer.warmup_steps != -1) in_file_.push_back("optimizer.warmup_steps");
    if (probe.lora.r != -1) in_file_.push_back("lora.r");
  }

  // Returns whether "section.key" was set by a flag or the config file.
  bool has(const std::string& name) const {
    for (const ConfigOverride& o : request_.overrides)
      if (o.name == name) return true;
    return std::find(in_file_.begin(), in_file_.end(), name) != in_file_.end();
  }
  // Returns whether "section.key" was set by a flag.
  bool flag(const std::string& name) const {
    return std::any_of(request_.overrides.begin(), request_.overrides.end(),
                       [&](const ConfigOverride& o) { return o.name == name; });
  }

 private:
  const FinetuneRequest& request_;
  std::vector<std::string> in_file_;
};

fs::path checked_base_dir(const fs::path& model_dir) {
  ANVIL_CHECK(!model_dir.empty(), "[finetune] --model is required: a Hugging Face model directory");
  ANVIL_CHECK(fs::is_directory(model_dir),
              "[finetune] --model {}: no such directory (expected a Hugging Face model "
              "directory with config.json, safetensors weights and a tokenizer)",
              model_dir.string());
  ANVIL_CHECK(fs::exists(model_dir / "config.json"),
              "[finetune] --model {}: not a Hugging Face model directory (no config.json)",
              model_dir.string());
  ANVIL_CHECK(fs::exists(model_dir / "tokenizer.json") || fs::exists(model_dir / "tokenizer.model"),
              "[finetune] --model {}: no tokenizer.json or tokenizer.model to render the data with",
              model_dir.string());
  return fs::absolute(model_dir).lexically_normal();
}

// Takes the adapter settings of a PEFT folder (r, alpha, dropout, targets) and starts the
// adapters from its values; flags and --config still apply on top, and a shape that then no
// longer matches the file is refused when the adapter loads.
void continue_adapter(TrainConfig& config, const fs::path& adapter) {
  const PeftAdapterInfo info = read_peft_adapter_config(adapter);
  config.lora.r = info.lora.r;
  config.lora.alpha = info.lora.alpha;
  config.lora.dropout = info.lora.dropout;
  config.lora.targets = info.lora.targets;
  config.lora.init_from = fs::absolute(adapter).lexically_normal().string();
}

bool is_shard_folder(const std::string& data) {
  return fs::is_directory(data) && fs::exists(fs::path(data) / "meta.json");
}

// Renders JSONL into <run-dir>/data unless that was done by an earlier invocation; returns
// the shard folder. World rank 0 works, the others wait.
fs::path prepare_jsonl(const FinetuneRequest& request, const TrainConfig& config,
                       const HfModelConfig& hf, Communicator& world) {
  const fs::path out = request.run_dir / "data";
  if (world.rank() == 0 && !fs::exists(out / "meta.json")) {
    const bool glob = request.data.find_first_of("*?[") != std::string::npos;
    ANVIL_CHECK(glob || fs::exists(request.data),
                "[finetune] --data {}: no such file or folder (expected a .jsonl file of chat "
                "or alpaca records, or a folder from anvil prepare --sft)",
                request.data);
    const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(config.data.tokenizer);
    SftPrepareOptions options;
    options.inputs = {request.data};
    options.out_dir = out.string();
    if (!request.chat_template.empty()) {
      options.chat_template = parse_chat_template(request.chat_template);
    }
    options.model_type = hf.source.value("model_type", std::string());
    options.split_ratios = {1.0 - kValidationShare, kValidationShare, 0.0};
    options.seed = static_cast<uint64_t>(config.training.seed);
    options.seq_len = config.training.seq_len;
    options.packing = request.packing;
    options.max_record_bytes = request.max_record_bytes;
    options.show_progress = true;
    const bool had_run_dir = fs::exists(request.run_dir);
    SftPrepareSummary summary;
    try {
      summary = prepare_sft_dataset(options, *tokenizer);
    } catch (const Error&) {
      // No partial output: a run directory this command created goes again.
      std::error_code ignored;
      if (!had_run_dir) fs::remove_all(request.run_dir, ignored);
      throw;
    }
    log_info(
        "prepared {} examples ({} train, {} validation) with the {} template: {} tokens, "
        "{} trained (loss mask 1), in {:.1f} s -> {}",
        summary.examples, summary.splits[0].documents, summary.splits[1].documents,
        chat_template_name(summary.chat_template), summary.tokens, summary.loss_tokens,
        summary.seconds, out.string());
  } else if (world.rank() == 0) {
    log_info("using the SFT data prepared earlier in {}", out.string());
  }
  world.barrier();
  return out;
}

// Returns whether the data folder has a validation split with at least one window.
bool has_validation_windows(const TrainConfig& config) {
  try {
    const DataLoader val(config.data.path, config.data.val_split,
                         static_cast<int>(config.training.seq_len),
                         static_cast<uint64_t>(config.training.seed), false);
    return val.eval_windows() > 0;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

TrainConfig sft_defaults(bool full) {
  TrainConfig config;
  config.data.path.clear();
  config.training.steps = 1;  // replaced by the epoch count unless set
  config.training.batch_size = 4;
  config.training.seq_len = kDefaultSeqLen;
  config.training.doc_mask = true;  // packed examples never attend to each other
  config.training.eval_every = 0;
  config.training.eval_steps = 20;
  config.optimizer.lr = full ? 2e-5 : 2e-4;
  config.optimizer.min_lr = 0.0;
  config.optimizer.schedule = "cosine";
  config.optimizer.weight_decay = 0.0;
  config.optimizer.grad_clip = 1.0;
  config.checkpoint.every = 0;
  config.checkpoint.keep = 2;
  config.lora.r = full ? 0 : 8;
  config.lora.alpha = 16.0;
  config.lora.dropout = full ? 0.0 : 0.05;
  config.lora.targets = default_lora_targets();
  return config;
}

int64_t steps_for_epochs(double epochs, int64_t windows, int64_t rows_per_step) {
  ANVIL_CHECK(epochs > 0, "[finetune] --epochs must be > 0, got {}", epochs);
  ANVIL_CHECK(windows > 0,
              "[finetune] the training split has no complete window of training.seq_len tokens; "
              "add examples or lower --training.seq_len");
  const double steps =
      std::ceil(epochs * static_cast<double>(windows) / static_cast<double>(rows_per_step));
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}

namespace {

// Refuses data.sources: fine-tuning reads the one dataset --data names (a mixture of prepared
// pretraining datasets is anvil train's).
void refuse_data_sources(const TrainConfig& config) {
  ANVIL_CHECK(config.data.sources.empty(),
              "[finetune] data.sources is set ({} sources), but anvil finetune trains on the one "
              "dataset --data names; drop data.sources, or train the mixture with anvil train",
              config.data.sources.size());
}

}  // namespace

TrainConfig resolve_finetune_config(const FinetuneRequest& request, Communicator& world) {
  const fs::path base = checked_base_dir(request.model_dir);
  const ExplicitKeys explicit_keys(request);
  ANVIL_CHECK(!(request.full && explicit_keys.flag("lora.r")),
              "[finetune] --full trains every weight and takes no --lora.r; drop one of the two");
  ANVIL_CHECK(!(request.full && !request.adapter.empty()),
              "[finetune] --full trains every weight and takes no --adapter; drop one of the two");
  ANVIL_CHECK(!request.data.empty() || fs::exists(request.run_dir / "config.toml"),
              "[finetune] --data is required: a .jsonl file of chat or alpaca records, or a "
              "folder from anvil prepare --sft");

  const fs::path saved = request.run_dir / "config.toml";
  if (request.resume != "never" && request.config_path.empty() && fs::exists(saved)) {
    TrainConfig config;
    apply_config_file(config, saved.string());
    for (const ConfigOverride& o : request.overrides)
      apply_config_override(config, o.name, o.value);
    ANVIL_CHECK(fs::path(config.model.init_from) == base,
                "[finetune] run directory {} fine-tunes {}, not {}; choose another --run-dir",
                request.run_dir.string(), config.model.init_from, base.string());
    ANVIL_CHECK(!request.full || config.lora.r == 0,
                "[finetune] run directory {} trains LoRA adapters; --full needs another --run-dir",
                request.run_dir.string());
    refuse_data_sources(config);
    validate_config(config);
    return config;
  }

  TrainConfig config = sft_defaults(request.full);
  const HfModelConfig hf = read_hf_config(base);
  config.model = model_section_from(hf.llama);
  config.model.init_from = base.string();
  config.data.tokenizer = base.string();
  if (!request.adapter.empty()) continue_adapter(config, request.adapter);
  if (!request.config_path.empty()) apply_config_file(config, request.config_path);
  for (const ConfigOverride& o : request.overrides) apply_config_override(config, o.name, o.value);
  if (request.full) config.lora.r = 0;
  refuse_data_sources(config);
  if (!explicit_keys.has("training.seq_len")) {
    config.training.seq_len = std::min(config.training.seq_len, config.model.max_seq_len);
  }
  validate_config(config);
  if (!config.lora.init_from.empty()) {
    // An adapter made for another base fails here, before any data is prepared.
    const LoraOptions lora = lora_options_from(config.lora);
    read_peft_adapter_weights(config.lora.init_from, lora,
                              *make_lora_layout(llama_config_from(config.model), lora), {});
  }

  config.data.path = is_shard_folder(request.data)
                         ? request.data
                         : prepare_jsonl(request, config, hf, world).string();
  if (!explicit_keys.has("training.eval_steps") && !has_validation_windows(config)) {
    config.training.eval_steps = 0;
  }
  if (!explicit_keys.has("training.steps")) {
    const DataLoader train(config.data.path, "train", static_cast<int>(config.training.seq_len),
                           static_cast<uint64_t>(config.training.seed), true);
    const int64_t rows =
        config.training.batch_size * config.training.grad_accum * int64_t{world.size()};
    config.training.steps = steps_for_epochs(request.epochs, train.windows_per_epoch(), rows);
  }
  if (!explicit_keys.has("optimizer.warmup_steps")) {
    config.optimizer.warmup_steps = static_cast<int64_t>(
        std::ceil(kWarmupFraction * static_cast<double>(config.training.steps)));
  }
  validate_config(config);
  return config;
}

}  // namespace anvil
