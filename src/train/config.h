// The training configuration: typed sections with defaults, loaded from TOML and then from
// `--section.key=value` overrides, validated as a whole, and written back out resolved (every
// key, defaults included) as the run's config.toml. The list of keys is one table
// (config_fields()); a unit test pins it so the configuration surface only grows deliberately.
// Unknown sections and keys are errors that name the nearest valid key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/parameter_table.h"
#include "parallel/parallel_settings.h"

namespace anvil {

struct ModelConfigSection {
  int64_t dim = 256;
  int64_t n_layers = 6;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 4;
  int64_t head_dim = 0;  // 0: dim / n_heads
  int64_t ffn_dim = 704;
  int64_t vocab_size = 4096;
  int64_t max_seq_len = 256;
  double rope_theta = 10000.0;
  // rope_scaling of type "llama3" (Llama 3.1+): off when rope_scaling_factor is 0.
  double rope_scaling_factor = 0.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position = 8192;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  bool attention_bias = false;  // q/k/v projection biases (Qwen2)
  std::string init_from;        // empty: random initialisation
};

// One source of a weighted mixture ([data] sources): a prepared dataset folder and its weight.
struct DataSourceSpec {
  std::string path;
  double weight = 0;  // relative; the mixture normalises the weights
  bool operator==(const DataSourceSpec&) const = default;
};

struct DataConfigSection {
  std::string path = "data/fortunes";  // shard directory written by `anvil prepare`
  std::vector<DataSourceSpec> sources;  // non-empty: a weighted mixture instead of `path`
  std::string tokenizer;               // empty: the one named by the data dir's meta.json
  bool synthetic = false;              // random tokens, no files
  std::string val_split = "val";
};

struct TrainingConfigSection {
  int64_t steps = 400;
  int64_t batch_size = 8;  // sequences per micro-batch
  int64_t seq_len = 128;
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  std::string dtype = "f32";
  bool activation_checkpointing = false;
  bool doc_mask = false;
  int64_t seed = 1337;
  int64_t eval_every = 100;  // 0: evaluate only at the end
  int64_t eval_steps = 20;   // batches per evaluation
  // A step whose loss or gradient norm is not finite: false stops the run (exit status
  // kExitDiverged); true skips the step (no update) and stops only after max_skipped_steps
  // consecutive skipped steps.
  bool skip_nonfinite = false;
  int64_t max_skipped_steps = 5;
  // Loss scaling (optim/loss_scaler.h): "off", or "dynamic": the loss is multiplied by a
  // power-of-two scale that halves (and the step is skipped) when the gradients overflow and
  // doubles after loss_scale_growth_interval clean steps.
  std::string loss_scale = "off";
  double loss_scale_init = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
};

// Attention masks beyond causal (training.doc_mask adds documents): a sliding window, a
// sparse segment pattern and sink positions, on every layer but every dense_every-th
// (docs/long-context.md).
struct AttentionConfigSection {
  std::string pattern = "dense";  // dense, strided or lines
  int64_t segment = 0;            // positions per segment (strided, lines); a multiple of 64
  int64_t stride = 0;             // strided: every stride-th earlier segment is visible
  int64_t window = 0;             // sliding window in positions (0: off)
  int64_t sinks = 0;              // the first positions, visible to every query
  int64_t dense_every = 0;        // every N-th layer attends densely (0: none)
};

struct OptimizerConfigSection {
  double lr = 2e-3;
  double min_lr = 2e-4;
  std::string schedule = "cosine";
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // <= 0 disables clipping
  bool decay_embeddings = false;
  double wsd_decay_fraction = 0.2;
};

struct CheckpointConfigSection {
  int64_t every = 200;  // 0: only at the end (and on SIGINT/SIGTERM)
  int64_t keep = 3;
  // A checkpoint that cannot be written (disk full, ...): "stop" ends the run with the error,
  // "continue" warns and tries again at the next checkpoint step.
  std::string on_error = "stop";
};

struct LoraConfigSection {
  int64_t r = 0;  // 0: no adapters
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<std::string> targets = default_lora_targets();  // the attention projections
  std::string init_from;  // PEFT adapter folder the adapters start from (empty: fresh init)
  // The dtype the frozen base is held in: auto (training.dtype), f32, or bf16 (needs
  // training.dtype = bf16).
  std::string base_dtype = "auto";
};

struct EvalConfigSection {
  int64_t batch_size = 0;  // 0: training.batch_size
  // Benchmarks scored at every evaluation (eval/tasks.h), with one data path per task.
  std::vector<std::string> tasks;
  std::vector<std::string> task_data;
  int64_t task_shots = -1;  // -1: each task's default (mmlu 5)
  int64_t task_limit = 0;   // > 0: the first N questions of each subtask
};

struct LoggingConfigSection {
  int64_t every = 10;  // plain progress lines every N steps when stdout is not a terminal
  bool json = false;   // last stdout line is a JSON summary
  bool tensorboard = true;   // also write the metrics as TensorBoard event files
  double peak_tflops = 0.0;  // one device's peak TFLOP/s, for the MFU in the metrics; 0: no MFU
};

// A trace of steps A..B on every rank, merged into <run>/trace.json (docs/observability.md).
struct ProfileConfigSection {
  std::string steps;  // "A:B"; empty: no trace
};

// The share of a device's free memory a run's plan leaves unused by default (the runtime's own
// allocations, fragmentation): `anvil plan --reserve` and the pre-flight's preflight.margin.
inline constexpr double kDefaultMemoryReserve = 0.05;

// The pre-flight memory check of train, finetune and launch (plan/preflight.h): before anything
// large is allocated, the run's planned peak per device against what the device has free.
struct PreflightConfigSection {
  std::string mode = "check";  // check: refuse a run that will not fit; warn: say so, go on; off
  double margin = kDefaultMemoryReserve;  // share of the free memory the plan must leave free
};

// The defaults are the `tiny` demo preset (configs/tiny.toml): `anvil train` with no
// arguments trains exactly this.
struct TrainConfig {
  ModelConfigSection model;
  DataConfigSection data;
  TrainingConfigSection training;
  AttentionConfigSection attention;
  OptimizerConfigSection optimizer;
  ParallelSettings parallel;  // declared, validated and read by the engine as one type
  CheckpointConfigSection checkpoint;
  LoraConfigSection lora;
  EvalConfigSection eval;
  LoggingConfigSection logging;
  ProfileConfigSection profile;
  PreflightConfigSection preflight;
};

// A pointer to one field of a TrainConfig; its alternative is the field's value type.
using ConfigFieldRef = std::variant<int64_t*, double*, bool*, std::string*,
                                    std::vector<std::string>*, std::vector<DataSourceSpec>*>;

// One configuration key: where it lives and what it means.
struct ConfigField {
  std::string_view section;
  std::string_view key;
  std::string_view help;
  ConfigFieldRef (*ref)(TrainConfig&);
  // An integer key's values: sizes and counts the engine holds as int fit 32 bits; a key
  // marked wide (training.seed) takes any 64-bit value.
  bool wide = false;

  // Returns "section.key".
  std::string full_name() const;
};

// Returns every key, grouped by section in the order sections appear in config.toml.
const std::vector<ConfigField>& config_fields();
// Returns the section names in order.
const std::vector<std::string_view>& config_sections();

// Applies a TOML document (text, parsed as from file `source_name`) on top of `config`.
void apply_config_toml(TrainConfig& config, std::string_view text, const std::string& source_name);
// Applies the TOML file at `path` on top of `config`; errors name the file.
void apply_config_file(TrainConfig& config, const std::string& path);
// Applies one override: `name` is "section.key", `value` the text after '=' on the command line.
void apply_config_override(TrainConfig& config, std::string_view name, std::string_view value);

// One `--section.key=value` (or `--section.key value`) argument.
struct ConfigOverride {
  std::string name;
  std::string value;
};

// Removes every `--section.key[=value]` argument from `args` and returns them in order. A
// dotted flag without '=' takes the next argument as its value unless that starts with "--"
// or is absent, in which case the value is "true" (so `--data.synthetic` works).
std::vector<ConfigOverride> extract_config_overrides(std::vector<std::string>& args);

// Checks ranges and cross-key constraints; throws naming the key at fault.
void validate_config(const TrainConfig& config);

// Returns one field's value as TOML text ("256", "true", "\"cosine\"").
std::string config_value_text(TrainConfig& config, const ConfigField& field);

// Returns the resolved configuration as TOML: every key, with round-trip exact numbers.
std::string config_to_toml(const TrainConfig& config);

// Returns the valid name closest to `wanted` by edit distance (empty when `candidates` is).
std::string closest_name(std::string_view wanted, const std::vector<std::string>& candidates);

}  // namespace anvil
