// Whole-config validation. It checks each value's range and
// the constraints between keys (heads divide the width, seq_len fits max_seq_len, ...), and
// names the key at fault so the user knows which line or flag to fix.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "eval/tasks.h"
#include "optim/lr_schedule.h"
#include "model/context_parallel.h"
#include "model/parameter_table.h"
#include "model/tensor_parallel.h"
#include "train/base_model.h"
#include "train/config.h"
#include "train/model_setup.h"
#include "observe/profiler.h"

namespace anvil {
namespace {

void check_positive(int64_t value, std::string_view name) {
  ANVIL_CHECK(value > 0, "[config] {} must be > 0, got {}", name, value);
}

void check_non_negative(int64_t value, std::string_view name) {
  ANVIL_CHECK(value >= 0, "[config] {} must be >= 0, got {}", name, value);
}

void validate_model(const ModelConfigSection& model) {
  check_positive(model.dim, "model.dim");
  check_positive(model.n_layers, "model.n_layers");
  check_positive(model.n_heads, "model.n_heads");
  check_positive(model.n_kv_heads, "model.n_kv_heads");
  check_positive(model.ffn_dim, "model.ffn_dim");
  check_positive(model.vocab_size, "model.vocab_size");
  check_positive(model.max_seq_len, "model.max_seq_len");
  check_non_negative(model.head_dim, "model.head_dim");
  ANVIL_CHECK(model.head_dim > 0 || model.dim % model.n_heads == 0,
              "[config] model.dim ({}) must be a multiple of model.n_heads ({}) unless "
              "model.head_dim is set",
              model.dim, model.n_heads);
  const int64_t head_dim = model.head_dim > 0 ? model.head_dim : model.dim / model.n_heads;
  ANVIL_CHECK(head_dim % 2 == 0, "[config] the head dimension ({}) must be even for RoPE",
              head_dim);
  ANVIL_CHECK(model.n_heads % model.n_kv_heads == 0,
              "[config] model.n_heads ({}) must be a multiple of model.n_kv_heads ({})",
              model.n_heads, model.n_kv_heads);
  ANVIL_CHECK(model.rope_theta > 0, "[config] model.rope_theta must be > 0, got {}",
              model.rope_theta);
  ANVIL_CHECK(model.rope_scaling_factor >= 0,
              "[config] model.rope_scaling_factor must be >= 0 (0: off), got {}",
              model.rope_scaling_factor);
  ANVIL_CHECK(model.norm_eps > 0, "[config] model.norm_eps must be > 0, got {}", model.norm_eps);
}

// Checks [eval] tasks: known names, one existing data path each, and a setup that can score
// them (a tokenizer, whole sequences on every rank).
void validate_eval_tasks(const TrainConfig& config) {
  const EvalConfigSection& eval = config.eval;
  if (eval.tasks.empty()) {
    ANVIL_CHECK(eval.task_data.empty(), "[config] eval.task_data is set but eval.tasks is empty");
    return;
  }
  ANVIL_CHECK(eval.task_data.size() == eval.tasks.size(),
              "[config] eval.tasks names {} tasks but eval.task_data gives {} paths; give one "
              "data path per task, in the same order",
              eval.tasks.size(), eval.task_data.size());
  std::vector<std::string> names;
  for (const TaskInfo& task : known_tasks()) names.push_back(task.name);
  for (const std::string& name : eval.tasks) {
    ANVIL_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                "[config] eval.tasks: unknown task '{}' (did you mean '{}'?)", name,
                closest_name(name, names));
  }
  for (size_t i = 0; i < eval.tasks.size(); ++i) {
    const std::string& name = eval.tasks[i];
    ANVIL_CHECK(std::filesystem::exists(eval.task_data[i]),
                "[config] eval.task_data: {} (the data of {}) does not exist", eval.task_data[i],
                name);
    ANVIL_CHECK(name == "mmlu" || eval.task_shots <= 0,
                "[config] eval.task_shots applies to mmlu only; {} runs 0-shot", name);
  }
  ANVIL_CHECK(eval.task_shots >= -1, "[config] eval.task_shots must be >= -1");
  check_non_negative(eval.task_limit, "eval.task_limit");
  ANVIL_CHECK(!config.data.synthetic,
              "[config] eval.tasks needs a tokenizer, and synthetic data has none");
  ANVIL_CHECK(config.parallel.tp <= 1 && config.parallel.cp <= 1,
              "[config] eval.tasks scores with the KV cache, which needs whole sequences and "
              "the whole model on each rank: not available with parallel.tp or parallel.cp > 1");
}

void validate_training(const TrainConfig& config) {
  const TrainingConfigSection& training = config.training;
  check_positive(training.steps, "training.steps");
  check_positive(training.batch_size, "training.batch_size");
  check_positive(training.seq_len, "training.seq_len");
  check_positive(training.grad_accum, "training.grad_accum");
  check_non_negative(training.seed, "training.seed");
  check_non_negative(training.eval_every, "training.eval_every");
  check_non_negative(training.eval_steps, "training.eval_steps");
  check_positive(training.max_skipped_steps, "training.max_skipped_steps");
  ANVIL_CHECK(training.seq_len <= config.model.max_seq_len,
              "[config] training.seq_len ({}) exceeds model.max_seq_len ({})", training.seq_len,
              config.model.max_seq_len);
  ANVIL_CHECK(training.dtype == "f32" || training.dtype == "bf16" || training.dtype == "fp16",
              "[config] training.dtype must be f32, bf16 or fp16, got '{}'", training.dtype);
  ANVIL_CHECK(training.loss_scale == "off" || training.loss_scale == "dynamic",
              "[config] training.loss_scale must be off or dynamic, got '{}'",
              training.loss_scale);
  if (training.loss_scale == "dynamic") {
    int exponent = 0;
    ANVIL_CHECK(training.loss_scale_init >= 1.0 && training.loss_scale_init <= 0x1p127 &&
                    std::frexp(training.loss_scale_init, &exponent) == 0.5,
                "[config] training.loss_scale_init must be a power of two from 1 to 2^127, "
                "got {}",
                training.loss_scale_init);
    check_positive(training.loss_scale_growth_interval, "training.loss_scale_growth_interval");
  }
}

// The optimized CPU kernels work on 64 x 64 tiles: a segment of whole tiles makes every tile
// wholly visible or wholly hidden by the pattern, so hidden work is skipped, not masked.
constexpr int64_t kAttentionTile = 64;

void validate_attention(const TrainConfig& config) {
  const AttentionConfigSection& attention = config.attention;
  const int64_t seq_len = config.training.seq_len;
  const std::vector<std::string> patterns = {"dense", "strided", "lines"};
  ANVIL_CHECK(std::find(patterns.begin(), patterns.end(), attention.pattern) != patterns.end(),
              "[config] attention.pattern must be one of {}, got '{}' (did you mean '{}'?)",
              fmt::join(patterns, ", "), attention.pattern,
              closest_name(attention.pattern, patterns));
  check_non_negative(attention.window, "attention.window");
  check_non_negative(attention.sinks, "attention.sinks");
  check_non_negative(attention.dense_every, "attention.dense_every");
  ANVIL_CHECK(attention.window <= seq_len,
              "[config] attention.window ({}) is larger than the context training.seq_len ({}); "
              "such a window hides nothing (use 0 for no window)",
              attention.window, seq_len);
  ANVIL_CHECK(attention.sinks < seq_len,
              "[config] attention.sinks ({}) must be smaller than training.seq_len ({})",
              attention.sinks, seq_len);
  const bool sparse = attention.pattern != "dense";
  if (!sparse) {
    ANVIL_CHECK(attention.segment == 0 && attention.stride == 0,
                "[config] attention.segment and attention.stride belong to the strided and lines "
                "patterns; attention.pattern is dense (got segment {}, stride {})",
                attention.segment, attention.stride);
  } else {
    check_positive(attention.segment, "attention.segment");
    ANVIL_CHECK(attention.segment % kAttentionTile == 0,
                "[config] attention.segment ({}) must be a multiple of the attention tile ({}) so "
                "the kernels skip hidden tiles whole",
                attention.segment, kAttentionTile);
    ANVIL_CHECK(attention.segment < seq_len,
                "[config] attention.segment ({}) must be smaller than training.seq_len ({}): one "
                "segment holding the whole context is dense attention",
                attention.segment, seq_len);
  }
  if (attention.pattern == "strided") {
    check_positive(attention.stride, "attention.stride");
  } else {
    ANVIL_CHECK(attention.stride == 0,
                "[config] attention.stride belongs to the strided pattern; attention.pattern is "
                "{} (got stride {})",
                attention.pattern, attention.stride);
  }
  ANVIL_CHECK(attention.dense_every == 0 || sparse || attention.window > 0,
              "[config] attention.dense_every = {} alternates dense layers with sparse ones, but "
              "no layer is sparse (attention.pattern is dense and attention.window is 0)",
              attention.dense_every);
  ANVIL_CHECK(attention.sinks == 0 || sparse || attention.window > 0,
              "[config] attention.sinks = {} makes positions visible that a window or a sparse "
              "pattern hides; with dense attention every position is already visible",
              attention.sinks);
}

void validate_optimizer(const OptimizerConfigSection& optimizer) {
  ANVIL_CHECK(optimizer.lr > 0, "[config] optimizer.lr must be > 0, got {}", optimizer.lr);
  ANVIL_CHECK(optimizer.min_lr >= 0 && optimizer.min_lr <= optimizer.lr,
              "[config] optimizer.min_lr must be in [0, optimizer.lr = {}], got {}", optimizer.lr,
              optimizer.min_lr);
  const auto names = lr_schedule_kind_names();
  ANVIL_CHECK(std::find(names.begin(), names.end(), optimizer.schedule) != names.end(),
              "[config] optimizer.schedule must be one of {}, got '{}' (did you mean '{}'?)",
              fmt::join(names, ", "), optimizer.schedule, closest_name(optimizer.schedule, names));
  check_non_negative(optimizer.warmup_steps, "optimizer.warmup_steps");
  ANVIL_CHECK(optimizer.weight_decay >= 0, "[config] optimizer.weight_decay must be >= 0, got {}",
              optimizer.weight_decay);
  ANVIL_CHECK(optimizer.beta1 >= 0 && optimizer.beta1 < 1,
              "[config] optimizer.beta1 must be in [0, 1), got {}", optimizer.beta1);
  ANVIL_CHECK(optimizer.beta2 >= 0 && optimizer.beta2 < 1,
              "[config] optimizer.beta2 must be in [0, 1), got {}", optimizer.beta2);
  ANVIL_CHECK(optimizer.eps > 0, "[config] optimizer.eps must be > 0, got {}", optimizer.eps);
  ANVIL_CHECK(optimizer.wsd_decay_fraction >= 0 && optimizer.wsd_decay_fraction <= 1,
              "[config] optimizer.wsd_decay_fraction must be in [0, 1], got {}",
              optimizer.wsd_decay_fraction);
}

void validate_data(const DataConfigSection& data) {
  if (data.sources.empty()) return;
  ANVIL_CHECK(!data.synthetic,
              "[config] data.sources and data.synthetic are both set; choose one");
  ANVIL_CHECK(data.path == DataConfigSection{}.path,
              "[config] data.path ('{}') and data.sources are both set; a mixture names every "
              "dataset in data.sources",
              data.path);
  for (size_t i = 0; i < data.sources.size(); ++i) {
    const DataSourceSpec& source = data.sources[i];
    ANVIL_CHECK(!source.path.empty(), "[config] data.sources[{}] has an empty path", i);
    ANVIL_CHECK(std::isfinite(source.weight) && source.weight > 0,
                "[config] data.sources[{}] ('{}') has weight {}; weights must be positive "
                "numbers",
                i, source.path, source.weight);
    for (size_t j = 0; j < i; ++j) {
      ANVIL_CHECK(data.sources[j].path != source.path,
                  "[config] data.sources names '{}' twice; give it one entry with the summed "
                  "weight",
                  source.path);
    }
  }
}

void validate_rest(const TrainConfig& config) {
  validate_data(config.data);
  validate_parallel_settings(config.parallel);
  // What the [parallel] settings ask of the training shape.
  check_cp_seq_len(config.training.seq_len, static_cast<int>(config.parallel.cp));
  // Under context parallelism a rank holds seq_len / cp positions of each sequence.
  const int64_t local_seq = config.training.seq_len / config.parallel.cp;
  ANVIL_CHECK(!config.parallel.sequence_parallel ||
                  (config.training.batch_size * local_seq) % config.parallel.tp == 0,
              "[config] parallel.sequence_parallel: tp = {} must divide the batch_size x seq_len "
              "/ cp = {} x {} positions of a rank's micro-batch",
              config.parallel.tp, config.training.batch_size, local_seq);
  check_non_negative(config.checkpoint.every, "checkpoint.every");
  check_positive(config.checkpoint.keep, "checkpoint.keep");
  ANVIL_CHECK(config.preflight.mode == "check" || config.preflight.mode == "warn" ||
                  config.preflight.mode == "off",
              "[config] preflight.mode must be check, warn or off, got '{}'",
              config.preflight.mode);
  ANVIL_CHECK(config.preflight.margin >= 0 && config.preflight.margin < 1,
              "[config] preflight.margin must be in [0, 1), got {}", config.preflight.margin);
  ANVIL_CHECK(config.checkpoint.on_error == "stop" || config.checkpoint.on_error == "continue",
              "[config] checkpoint.on_error must be stop or continue, got '{}'",
              config.checkpoint.on_error);
  check_non_negative(config.lora.r, "lora.r");
  ANVIL_CHECK(config.lora.init_from.empty() || config.lora.r > 0,
              "[config] lora.init_from = {} continues a LoRA adapter, but lora.r = 0 trains no "
              "adapters",
              config.lora.init_from);
  ANVIL_CHECK(config.lora.base_dtype == "auto" || config.lora.base_dtype == "f32" ||
                  config.lora.base_dtype == "bf16",
              "[config] lora.base_dtype must be auto, f32 or bf16, got '{}'",
              config.lora.base_dtype);
  ANVIL_CHECK(config.lora.base_dtype != "bf16" || config.training.dtype == "bf16",
              "[config] lora.base_dtype = bf16 feeds the bf16 base to the GEMMs as it is, which "
              "needs training.dtype = bf16 (got training.dtype = {}); use lora.base_dtype = f32 "
              "or auto",
              config.training.dtype);
  ANVIL_CHECK(config.lora.alpha > 0, "[config] lora.alpha must be > 0, got {}", config.lora.alpha);
  ANVIL_CHECK(config.lora.dropout >= 0 && config.lora.dropout < 1,
              "[config] lora.dropout must be in [0, 1), got {}", config.lora.dropout);
  check_non_negative(config.eval.batch_size, "eval.batch_size");
  validate_eval_tasks(config);
  check_positive(config.logging.every, "logging.every");
  ANVIL_CHECK(config.logging.peak_tflops >= 0 && std::isfinite(config.logging.peak_tflops),
              "[config] logging.peak_tflops must be >= 0 TFLOP/s (0: no MFU in the metrics), "
              "got {}",
              config.logging.peak_tflops);
  parse_profile_steps(config.profile.steps, config.training.steps);
}

// Checks the adapters against the model before anything is prepared or built: every target
// is a module the parameter table lets LoRA wrap, and r fits the matrices they wrap.
void validate_lora(const TrainConfig& config) {
  if (config.lora.r == 0) return;
  const LlamaConfig llama = llama_config_from(config.model);
  for (const std::string& target : config.lora.targets) {
    const auto [out, in] = param_dims(lora_target_row(target), llama);
    ANVIL_CHECK(config.lora.r <= std::min(out, in),
                "[config] lora.r = {} exceeds the rank of {} ({} x {} in this model): an "
                "adapter's rank is at most the smaller side of the matrix it wraps",
                config.lora.r, target, out, in);
  }
  validate_lora_options(lora_options_from(config.lora));
}

}  // namespace

void validate_config(const TrainConfig& config) {
  validate_model(config.model);
  validate_training(config);
  validate_attention(config);
  validate_optimizer(config.optimizer);
  validate_rest(config);
  // A tp that cannot split the heads, FFN or vocabulary stops here, before any rank takes the
  // run directory: an error raised later on one rank can end the job before rank 0 removes it.
  if (config.parallel.tp > 1)
    tp_shard_config(llama_config_from(config.model), static_cast<int>(config.parallel.tp));
  validate_lora(config);
}

}  // namespace anvil
