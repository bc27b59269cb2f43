// The training loop (see trainer.h). A step: fill this rank's micro-batches of the global
// batch on the host (micro-step m of data rank r reads BatchLayout's samples), and let the
// parallel engine count the global batch's trained tokens N, run every micro-batch's
// forward/backward with gradient scale 1/N, reduce the gradients in the global micro-batch
// order, clip by the global norm and apply AdamW at the scheduled rate. One process is the
// engine at world size 1. Nothing in a step depends on wall time, the world size or anything
// outside the checkpointed state, so a resumed run repeats the uninterrupted one bit for bit.
// World rank 0 alone prints, writes metrics and the run's files (a profile window's trace,
// profiler.h, has one file per rank).
// Failure policy: a step with a non-finite loss or gradient norm is never applied (the engine
// checks before the update); it stops the run with a DivergenceError, or with
// training.skip_nonfinite is skipped (step, learning-rate schedule and data cursor advance,
// AdamW does not) until max_skipped_steps in a row. A checkpoint that cannot be written stops
// the run, or with checkpoint.on_error = "continue" is retried at the next checkpoint step.
#include "train/training_benchmarks.h"
#include "train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "backend/backend.h"
#include "comm/blocking_communicator.h"
#include "comm/communicator.h"
#include "comm/device_communicator.h"
#include "comm/watchdog.h"
#include "core/divergence_error.h"
#include "core/error.h"
#include "core/log.h"
#include "core/threading.h"
#include "core/trace.h"
#include "io/file_util.h"
#include "model/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/peft_adapter.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "parallel/collectives.h"
#include "parallel/engine.h"
#include "parallel/sharded_checkpoint.h"
#include "parallel/sharding_report.h"
#include "train/checkpointing.h"
#include "train/data_sources.h"
#include "observe/metrics.h"
#include "train/base_model.h"
#include "train/model_setup.h"
#include "observe/profiler.h"
#include "observe/progress.h"
#include "train/run_dir.h"
#include "train/signals.h"
#include "observe/tensorboard_sink.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

// The sharding and memory report of the run (sharding_report.h), in the run directory.
constexpr const char* kShardingReportFile = "sharding.json";

double seconds_between(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

// Checks that model.init_from (`source`, whose config.json says `theirs`) holds the weights
// the [model] section (`ours`) describes, and returns "" or a note on what changes. Only the
// positions may differ: continued pretraining at a longer context with a larger rope_theta or
// llama3 rope scaling (context extension, docs/long-context.md) keeps every weight's shape and
// meaning and only changes the RoPE frequencies and how far positions go.
std::string check_init_from_config(const std::filesystem::path& source, const LlamaConfig& theirs,
                                   const LlamaConfig& ours) {
  ANVIL_CHECK(theirs.weights_summary() == ours.weights_summary(),
              "[train] model.init_from {} holds a model with {}, but the [model] section "
              "describes {}; make them agree",
              source.string(), theirs.summary(), ours.summary());
  const std::string changes = ours.position_changes_from(theirs);
  if (changes.empty()) return "";
  return fmt::format("context extension from {}: {} (the weights are kept; the positions change)",
                     source.string(), changes);
}

// Returns the hang watchdog of a multi-rank run (none for one process, which never waits).
std::unique_ptr<CollectiveWatchdog> make_watchdog(const TrainConfig& config,
                                                  const Communicator& world) {
  if (config.parallel.collective_timeout_s <= 0 || world.size() == 1) return nullptr;
  auto watchdog =
      std::make_unique<CollectiveWatchdog>(config.parallel.collective_timeout_s, world.rank());
  watchdog->set_phase("start-up");
  return watchdog;
}

// Returns the largest value of every field of the ranks' snapshots (collective over `world`).
MemorySnapshot max_over_ranks(Communicator& world, const MemorySnapshot& mine) {
  MemorySnapshot max = mine;
  for (const MemorySnapshot& rank : all_gather_memory(world, mine)) {
    for (size_t c = 0; c < max.current.size(); ++c) {
      max.current[c] = std::max(max.current[c], rank.current[c]);
      max.peak[c] = std::max(max.peak[c], rank.peak[c]);
    }
    max.total = std::max(max.total, rank.total);
    max.total_peak = std::max(max.total_peak, rank.total_peak);
  }
  return max;
}

// Steps of each process run left out of the steady-state throughput (start-up effects).
constexpr int64_t kThroughputWarmupSteps = 2;

// Host memory for `rows` samples of `seq` positions, viewed as micro-batches.
class HostBatch {
 public:
  HostBatch(int64_t rows, int seq, bool with_doc_ids)
      : seq_(seq),
        tokens_(static_cast<size_t>(rows) * seq),
        targets_(tokens_.size()),
        loss_mask_(tokens_.size()),
        doc_ids_(with_doc_ids ? tokens_.size() : 0) {}

  // Fills rows [row, row + count) with samples [first, first + count) of `source`.
  void fill(SampleSource& source, int64_t row, int64_t first, int count) {
    const size_t offset = static_cast<size_t>(row) * seq_;
    const Shape shape{count, seq_};
    const Tensor doc_ids(doc_ids_.data() + (doc_ids_.empty() ? 0 : offset), DType::i32, shape);
    const Tensor loss_mask(loss_mask_.data() + offset, DType::f32, shape);
    source.fill(first, count, Tensor(tokens_.data() + offset, DType::i32, shape),
                Tensor(targets_.data() + offset, DType::i32, shape),
                doc_ids_.empty() ? nullptr : &doc_ids, &loss_mask);
  }

  // Makes the first loss-mask value a NaN (fault injection: test_asks_nan_at_step).
  void poison_loss_mask() { loss_mask_.front() = std::numeric_limits<float>::quiet_NaN(); }

  // Points `views` at rows [row, row + count) and returns the Batch that reads them.
  struct Views {
    Tensor tokens, targets, loss_mask, doc_ids;
  };
  Batch micro_batch(int64_t row, int count, Views& views) {
    const size_t offset = static_cast<size_t>(row) * seq_;
    const Shape shape{count, seq_};
    views.tokens = Tensor(tokens_.data() + offset, DType::i32, shape);
    views.targets = Tensor(targets_.data() + offset, DType::i32, shape);
    views.loss_mask = Tensor(loss_mask_.data() + offset, DType::f32, shape);
    Batch batch{views.tokens, views.targets, &views.loss_mask, nullptr};
    if (!doc_ids_.empty()) {
      views.doc_ids = Tensor(doc_ids_.data() + offset, DType::i32, shape);
      batch.doc_ids = &views.doc_ids;
    }
    return batch;
  }

 private:
  int seq_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> targets_;
  std::vector<float> loss_mask_;
  std::vector<int32_t> doc_ids_;
};

struct StepOutcome {
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double seconds = 0;
  bool skipped = false;  // not applied: the loss or gradient norm was not finite
  double loss_scale = 0;  // the dynamic loss scale the step ran at (0: none)
};

class Trainer {
 public:
  explicit Trainer(const TrainRunOptions& options);
  TrainResult run();

 private:
  void start_or_resume();
  void load_initial_weights();
  // Loads the frozen base of a LoRA run from model.init_from (checked against [model]).
  void load_base_model();
  // Prints the sharding and memory report and writes it to the run directory (collective).
  void report_sharding();
  StepOutcome train_step(int64_t step);
  EvalRecord evaluate(int64_t step);
  // Saves a checkpoint of the current step; with checkpoint.on_error = "continue" a failed
  // save is a warning (unless `stopping`: a stop must not lose the run silently).
  void save_checkpoint(bool stopping);
  // Handles a step the engine did not apply: throws, or counts it as skipped.
  void handle_nonfinite_step(int64_t step, const StepOutcome& outcome);
  // Returns "resume from <dir>" or a note that the run has no checkpoint yet.
  std::string resume_hint() const;
  void log_resume_config_changes(const std::string& saved_config_toml);
  // Prints a line on world rank 0 only.
  void message(const std::string& line);
  // Tells the watchdog what a collective that hangs from now on belongs to.
  void watch(int64_t step, const char* phase) {
    if (!watchdog_) return;
    watchdog_->set_step(step);
    watchdog_->set_phase(phase);
  }

  const TrainRunOptions& options_;
  const TrainConfig& config_;
  Communicator& world_;
  bool root_;
  // Before every member whose construction runs collectives.
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  RunDir run_;
  std::unique_ptr<Backend> backend_;
  TrainingData data_;
  LlamaConfig llama_;
  // The world the mesh splits: world_ itself for host tensors, else the backend's device
  // communicator over it (comm/device_communicator.h); made blocking when
  // parallel.overlap = false.
  std::unique_ptr<Communicator> device_world_;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<DataParallelEngine> engine_;
  LrSchedule schedule_;
  CheckpointStore store_;
  TrainProgress progress_;
  // Set when training.loss_scale = "dynamic"; its state is mirrored in progress_.loss_scale.
  std::optional<DynamicLossScaler> loss_scaler_;
  ProgressPrinter printer_;
  int micro_batch_;
  int grad_accum_;
  int seq_len_;
  int eval_batch_size_;
  HostBatch train_batch_;
  HostBatch eval_batch_;
  TrainingBenchmarks benchmarks_;
  StepProfiler profiler_;
  int64_t last_saved_step_ = -1;
  int64_t checkpoint_failures_ = 0;
  std::filesystem::path last_checkpoint_;
  Clock::time_point run_start_ = Clock::now();
};

Trainer::Trainer(const TrainRunOptions& options)
    : options_(options),
      config_(options.config),
      world_(options.world != nullptr ? *options.world : anvil::world()),
      root_(world_.rank() == 0),
      watchdog_(make_watchdog(options.config, world_)),
      run_{options.run_dir},
      backend_(make_backend(options.backend)),
      data_(open_training_data(options.config)),
      llama_(llama_config_from(options.config.model)),
      store_(run_.checkpoints_dir(), static_cast<int>(options.config.checkpoint.keep)),
      // Open MPI gives ranks a pseudo-terminal whatever mpirun writes to: plain lines then.
      printer_(stdout_is_terminal() && world_.size() == 1, options.config.logging.every),
      micro_batch_(static_cast<int>(options.config.training.batch_size)),
      grad_accum_(static_cast<int>(options.config.training.grad_accum)),
      seq_len_(static_cast<int>(options.config.training.seq_len)),
      eval_batch_size_(static_cast<int>(eval_batch_size(options.config))),
      train_batch_(int64_t{micro_batch_} * grad_accum_, seq_len_, options.config.training.doc_mask),
      eval_batch_(eval_batch_size_, seq_len_, options.config.training.doc_mask),
      benchmarks_(options.config),
      profiler_(parse_profile_steps(options.config.profile.steps, options.config.training.steps),
                options.run_dir, world_) {
  ANVIL_CHECK(config_.lora.r == 0 || !config_.model.init_from.empty(),
              "[train] lora.r = {} trains adapters on a frozen base, but model.init_from names "
              "no base model (use anvil finetune --model DIR, or set lora.r = 0)",
              config_.lora.r);
  if (config_.training.loss_scale == "dynamic") {
    loss_scaler_.emplace(
        LossScalerOptions{.initial_scale = config_.training.loss_scale_init,
                          .growth_interval = config_.training.loss_scale_growth_interval});
  }
  // Under context parallelism the model holds seq_len / cp rows of each sample.
  check_cp_seq_len(seq_len_, static_cast<int>(config_.parallel.cp));
  const ModelOptions model_options = model_options_from(config_);
  ANVIL_CHECK(backend_->supports_compute_dtype(model_options.compute_dtype),
              "[train] training.dtype = {} has no kernels on --backend {}{}",
              config_.training.dtype, backend_->name(),
              model_options.compute_dtype == DType::f16
                  ? " (fp16 runs on cpu-ref, the reference loops; use bf16 on this backend)"
                  : "");
  device_world_ = make_device_communicator(world_, *backend_);
  if (!config_.parallel.overlap) {
    device_world_ = device_world_ ? std::make_unique<BlockingCommunicator>(std::move(device_world_))
                                  : std::make_unique<BlockingCommunicator>(world_);
  }
  mesh_ = std::make_unique<DeviceMesh>(device_world_ ? *device_world_ : world_,
                                       parallel_settings_from(config_.parallel));
  model_ = std::make_unique<LlamaModel>(
      llama_, *backend_, DataParallelEngine::model_options(model_options, *mesh_));
  EngineOptions engine_options;
  engine_options.hyper = adamw_hyper_params_from(config_.optimizer);
  engine_options.grad_clip = config_.optimizer.grad_clip;
  engine_options.micro_batches = grad_accum_;
  engine_ = std::make_unique<DataParallelEngine>(*model_, *mesh_, engine_options);
  schedule_.kind = parse_lr_schedule_kind(config_.optimizer.schedule);
  schedule_.peak_lr = config_.optimizer.lr;
  schedule_.min_lr = config_.optimizer.min_lr;
  schedule_.warmup_steps = config_.optimizer.warmup_steps;
  schedule_.total_steps = config_.training.steps;
  schedule_.wsd_decay_fraction = config_.optimizer.wsd_decay_fraction;
}

void Trainer::log_resume_config_changes(const std::string& saved_config_toml) {
  TrainConfig saved;
  apply_config_toml(saved, saved_config_toml, "checkpoint config.toml");
  TrainConfig current = config_;
  std::vector<std::string> changed;
  for (const ConfigField& field : config_fields()) {
    TrainConfig one = saved;
    std::visit(
        [&](auto* saved_value) {
          using T = std::remove_pointer_t<decltype(saved_value)>;
          if (*saved_value != *std::get<T*>(field.ref(current)))
            changed.push_back(field.full_name());
        },
        field.ref(one));
  }
  if (!changed.empty() && root_) {
    log_warn("resuming with a configuration that differs from the checkpoint's in: {}",
             fmt::join(changed, ", "));
  }
}

void Trainer::message(const std::string& line) {
  if (root_) printer_.message(line);
}

void Trainer::load_base_model() {
  const std::filesystem::path base = config_.model.init_from;
  const std::string note = check_init_from_config(base, llama_config_from_hf_json(base), llama_);
  if (!note.empty()) message(note);
  load_base_weights(base, *engine_);
}

void Trainer::load_initial_weights() {
  if (model_->lora_enabled()) {
    load_base_model();
    if (config_.lora.init_from.empty()) {
      engine_->init_weights(static_cast<uint64_t>(config_.training.seed));
    } else {
      read_engine_adapter(*engine_, config_.lora.init_from);
    }
    message(fmt::format("base weights from {} (frozen); LoRA adapters r={} alpha={} on {}, {}",
                        config_.model.init_from, config_.lora.r, config_.lora.alpha,
                        fmt::join(config_.lora.targets, ","),
                        config_.lora.init_from.empty()
                            ? std::string("freshly initialised")
                            : "continued from " + config_.lora.init_from));
    return;
  }
  if (config_.model.init_from.empty()) {
    engine_->init_weights(static_cast<uint64_t>(config_.training.seed));
    return;
  }
  const std::filesystem::path source = config_.model.init_from;
  if (std::filesystem::exists(source / "config.json")) {
    // A Hugging Face directory, or an anvil checkpoint (which carries a config.json too).
    const std::string note =
        check_init_from_config(source, llama_config_from_hf_json(source), llama_);
    if (!note.empty()) message(note);
    const SafetensorsCollection tensors = open_hf_tensors(source);
    check_hf_tensors(tensors, llama_);
    read_engine_weights(*engine_, tensors);
  } else {
    ANVIL_CHECK(std::filesystem::is_regular_file(source),
                "[train] model.init_from: {} is neither a Hugging Face model folder "
                "(config.json + safetensors) nor a .safetensors file",
                source.string());
    read_engine_weights(*engine_, SafetensorsCollection::open(source));
  }
  message(fmt::format("initialised weights from {}", source.string()));
}

void Trainer::start_or_resume() {
  if (root_) create_run_dir(run_.root);
  world_.barrier();
  const std::optional<std::filesystem::path> checkpoint =
      select_resume_checkpoint(options_.resume, store_, world_);
  if (checkpoint) {
    log_resume_config_changes(read_checkpoint_config(*checkpoint));
    if (model_->lora_enabled()) {
      check_base_record(*checkpoint, config_.model.init_from);
      load_base_model();
    }
    progress_ = load_checkpoint(*checkpoint, *engine_);
    // A checkpoint of a run without loss scaling starts the scaler afresh.
    if (loss_scaler_ && progress_.loss_scale) loss_scaler_->restore(*progress_.loss_scale);
    progress_.loss_scale.reset();
    if (loss_scaler_) progress_.loss_scale = loss_scaler_->state();
    progress_.cursor.check_resumable_with(data_.stream);
    ANVIL_CHECK(progress_.step <= config_.training.steps,
                "[train] checkpoint {} is at step {}, past training.steps = {}",
                checkpoint->string(), progress_.step, config_.training.steps);
    last_saved_step_ = progress_.step;
    last_checkpoint_ = *checkpoint;
    message(fmt::format("resumed from {} (step {}, sample {})", checkpoint->string(),
                        progress_.step, progress_.cursor.next_sample));
  } else {
    ANVIL_CHECK(options_.resume != "never" || !root_ || !store_.latest_valid(),
                "[train] run directory {} already holds checkpoints; continue it with "
                "--resume auto, or choose another --run-dir",
                run_.root.string());
    load_initial_weights();
    progress_ = TrainProgress{};
    progress_.cursor = data_.stream;
    if (loss_scaler_) progress_.loss_scale = loss_scaler_->state();
  }
  if (root_) write_run_config(run_, config_);
}

StepOutcome Trainer::train_step(int64_t step) {
  const Clock::time_point begin = Clock::now();
  watch(step, nullptr);
  BatchLayout layout;
  layout.micro_batch = micro_batch_;
  layout.grad_accum = grad_accum_;
  layout.world_size = mesh_->sample_world();
  // Samples are numbered from the cursor: BatchLayout's step 0 is this step's global batch.
  std::vector<HostBatch::Views> views(static_cast<size_t>(grad_accum_));
  std::vector<Batch> micro_batches;
  TraceSpan data_span("data", "data");
  data_span.arg("samples", int64_t{micro_batch_} * grad_accum_);
  for (int m = 0; m < grad_accum_; ++m) {
    const int64_t row = int64_t{m} * micro_batch_;
    const int64_t first = layout.first_sample(0, m, mesh_->sample_rank());
    train_batch_.fill(*data_.train, row, progress_.cursor.next_sample + first, micro_batch_);
    micro_batches.push_back(
        train_batch_.micro_batch(row, micro_batch_, views[static_cast<size_t>(m)]));
  }
  data_span.end();
  if (mesh_->data_rank() == 0 && test_asks_nan_at_step(step)) train_batch_.poison_loss_mask();
  StepOutcome outcome;
  outcome.lr = schedule_.lr_at(step);
  model_->set_dropout_step(step);  // adapter dropout masks are a function of the step
  outcome.loss_scale = loss_scaler_ ? loss_scaler_->scale() : 0.0;
  const StepReport report =
      engine_->train_step(micro_batches, outcome.lr, loss_scaler_ ? loss_scaler_->scale() : 1.0);
  outcome.loss = report.loss.mean();
  outcome.grad_norm = report.grad_norm;
  outcome.skipped = !report.applied;
  // A finite loss whose scaled gradients overflowed is loss scaling at work: skip the step
  // and halve the scale. At the minimum scale the overflow is the model's, handled as any
  // non-finite step.
  const bool overflow = outcome.skipped && loss_scaler_ && std::isfinite(report.loss.sum);
  if (overflow && loss_scaler_->update(false)) {
    ++progress_.skipped_steps;
    if (root_) {
      log_info("[train] step {}: gradients overflowed at loss scale {}; step skipped, scale "
               "now {}",
               step, outcome.loss_scale, loss_scaler_->scale());
    }
  } else if (outcome.skipped) {
    handle_nonfinite_step(step, outcome);
  } else {
    progress_.consecutive_skipped = 0;
    if (loss_scaler_) loss_scaler_->update(true);
  }
  if (loss_scaler_) progress_.loss_scale = loss_scaler_->state();
  backend_->synchronize();

  progress_.step = step;
  progress_.cursor.next_sample += layout.global_batch();
  progress_.tokens_seen += layout.global_batch() * seq_len_;
  outcome.seconds = seconds_between(begin, Clock::now());
  progress_.train_seconds += outcome.seconds;
  return outcome;
}

EvalRecord Trainer::evaluate(int64_t step) {
  TraceSpan span("evaluate", "eval");
  EvalRecord record;
  record.step = step;
  record.has_loss = data_.val != nullptr;
  if (!benchmarks_.empty()) {
    record.task_scores = benchmarks_.score(*engine_, eval_batch_size_);
    std::string line;
    for (const auto& [name, value] : record.task_scores) {
      line += fmt::format("{}{} {:.4f}", line.empty() ? "" : " | ", name, value);
    }
    message(fmt::format("eval step {}: {}", step, line));
  }
  if (!data_.val) {
    record.elapsed_s = seconds_between(run_start_, Clock::now());
    return record;
  }
  // Batch i runs on data rank i % world; the engine adds the sums in batch order.
  const int64_t batches = (data_.val_samples + eval_batch_size_ - 1) / eval_batch_size_;
  HostBatch::Views views;
  const LossSum total = engine_->evaluate(batches, [&](int64_t i) {
    const int64_t first = i * eval_batch_size_;
    const int count =
        static_cast<int>(std::min<int64_t>(eval_batch_size_, data_.val_samples - first));
    TraceSpan data_span("data", "data");
    data_span.arg("samples", count);
    eval_batch_.fill(*data_.val, 0, first, count);
    return eval_batch_.micro_batch(0, count, views);
  });
  record.loss = total.mean();
  record.perplexity = std::exp(record.loss);
  record.tokens = total.count;
  record.elapsed_s = seconds_between(run_start_, Clock::now());
  message(fmt::format("eval step {}: val loss {:.4f} | ppl {:.2f} | {} tokens", step, record.loss,
                      record.perplexity, record.tokens));
  return record;
}

std::string Trainer::resume_hint() const {
  if (last_checkpoint_.empty()) return "the run has no checkpoint yet";
  return "resume from " + last_checkpoint_.string();
}

void Trainer::handle_nonfinite_step(int64_t step, const StepOutcome& outcome) {
  // Every rank sees the same global loss and norm, so every rank throws or skips alike.
  if (!config_.training.skip_nonfinite) {
    throw DivergenceError(
        fmt::format("[train] training diverged at step {}: loss {} / gradient norm {} is not "
                    "finite; the step was not applied and no checkpoint holds it. Lower "
                    "optimizer.lr or set optimizer.grad_clip (or set training.skip_nonfinite = "
                    "true to skip such steps), then {}",
                    step, outcome.loss, outcome.grad_norm, resume_hint()),
        __FILE__, __LINE__);
  }
  ++progress_.skipped_steps;
  ++progress_.consecutive_skipped;
  if (progress_.consecutive_skipped >= config_.training.max_skipped_steps) {
    throw DivergenceError(
        fmt::format("[train] training diverged: steps {}-{} all had a non-finite loss or "
                    "gradient norm ({} in a row, training.max_skipped_steps = {}) and were "
                    "skipped; the run is not recovering. Lower optimizer.lr or set "
                    "optimizer.grad_clip, then {}",
                    step - progress_.consecutive_skipped + 1, step,
                    progress_.consecutive_skipped, config_.training.max_skipped_steps,
                    resume_hint()),
        __FILE__, __LINE__);
  }
  if (root_) {
    log_warn("[train] step {}: loss {} / gradient norm {} is not finite; step skipped (no "
             "update; {} skipped so far, {} in a row; {} in a row stop the run)",
             step, outcome.loss, outcome.grad_norm, progress_.skipped_steps,
             progress_.consecutive_skipped, config_.training.max_skipped_steps);
  }
}

void Trainer::save_checkpoint(bool stopping) {
  const Clock::time_point begin = Clock::now();
  try {
    last_checkpoint_ = store_.save(*engine_, progress_, config_);
  } catch (const CheckpointSaveError& e) {
    if (config_.checkpoint.on_error != "continue" || stopping) throw;
    ++checkpoint_failures_;
    if (root_) {
      log_warn("{}; training continues (checkpoint.on_error = \"continue\") and tries again "
               "at the next checkpoint step", e.what());
    }
    return;
  }
  last_saved_step_ = progress_.step;
  message(fmt::format("checkpoint {} ({:.1f} s)", last_checkpoint_.string(),
                      seconds_between(begin, Clock::now())));
}

void Trainer::report_sharding() {
  const ShardingReport report = sharding_report(*engine_);  // collective
  message(report.text);
  if (root_) write_file_atomic(run_.root / kShardingReportFile, report.json.dump(2) + "\n");
}

TrainResult Trainer::run() {
  if (options_.dry_run) {
    // Everything is built and allocated (model, engine, optimizer, data); no weight is read.
    if (root_) create_run_dir(run_.root);
    world_.barrier();
    message(fmt::format("model {} ({:.2f}M parameters)", llama_.summary(),
                        static_cast<double>(llama_.param_count()) / 1e6));
    report_sharding();
    message(fmt::format("dry run: nothing trained; the report is in {}",
                        (run_.root / kShardingReportFile).string()));
    TrainResult result;
    result.run_dir = run_.root;
    return result;
  }
  start_or_resume();
  std::optional<MetricsSinks> metrics;
  if (root_) {
    metrics.emplace();
    metrics->add(std::make_unique<MetricsWriter>(run_.metrics_path(), last_saved_step_));
    if (config_.logging.tensorboard) {
      metrics->add(std::make_unique<TensorBoardSink>(run_.root, last_saved_step_));
    }
  }
  const int64_t total_steps = config_.training.steps;
  const int64_t global_rows = int64_t{micro_batch_} * grad_accum_ * mesh_->sample_world();
  const int64_t tokens_per_step = global_rows * seq_len_;
  TrainResult result;
  result.run_dir = run_.root;
  result.flops_per_token = llama_.flops_per_token(
      seq_len_, attention_schedule_from(config_.attention)
                    .mean_visible_fraction(llama_.n_layers, seq_len_));
  message(fmt::format("run {} | backend {} | {} threads{}", run_.root.string(), backend_->name(),
                      num_threads(), world_.size() > 1 ? " per rank" : ""));
  message(fmt::format("model {} ({:.2f}M parameters)", llama_.summary(),
                      static_cast<double>(llama_.param_count()) / 1e6));
  message(fmt::format("data {}", data_.description));
  if (!benchmarks_.empty()) message("benchmarks at each evaluation: " + benchmarks_.describe());
  message(fmt::format("{} steps x {} sequences x {} tokens = {} tokens per step", total_steps,
                      global_rows, seq_len_, tokens_per_step));
  report_sharding();

  watch(-1, nullptr);
  if (progress_.step == total_steps) {
    message(fmt::format("nothing to do: the run is complete at step {}", total_steps));
  }
  StopSignalGuard signals;
  const int64_t first_step = progress_.step + 1;
  double run_seconds = 0;  // step time of this process
  double steady_seconds = 0;
  int64_t steady_tokens = 0;
  double ema_step_seconds = 0;
  int64_t steady_steps = 0;
  MeshTraffic steady_traffic;
  for (int64_t step = first_step; step <= total_steps; ++step) {
    profiler_.before_step(step, mesh_->traffic(), backend_->memory_snapshot());
    TraceSpan step_span("step", "step");
    step_span.arg("step", step);
    const MeshTraffic before = mesh_->traffic();
    const StepOutcome outcome = train_step(step);
    const MeshTraffic after = mesh_->traffic();
    const int64_t steps_done = step - first_step + 1;
    run_seconds += outcome.seconds;
    if (steps_done > kThroughputWarmupSteps) {
      steady_seconds += outcome.seconds;
      steady_tokens += tokens_per_step;
      ++steady_steps;
      steady_traffic.tp += after.tp - before.tp;
      steady_traffic.cp += after.cp - before.cp;
      steady_traffic.data += after.data - before.data;
      steady_traffic.dp += after.dp - before.dp;
      steady_traffic.fsdp += after.fsdp - before.fsdp;
    }
    ema_step_seconds =
        steps_done == 1 ? outcome.seconds : 0.9 * ema_step_seconds + 0.1 * outcome.seconds;
    const double step_tokens_per_s = static_cast<double>(tokens_per_step) / outcome.seconds;
    // Every step is logged, so every step gathers the ranks' memory (one small collective).
    const MemorySnapshot memory = max_over_ranks(mesh_->world(), backend_->memory_snapshot());
    if (root_) {
      // Every rank is one device running at most logging.peak_tflops.
      const double mfu = config_.logging.peak_tflops > 0
                             ? step_tokens_per_s * result.flops_per_token /
                                   (config_.logging.peak_tflops * 1e12 * world_.size())
                             : -1.0;
      TrainStepRecord record{step, outcome.loss, outcome.lr, outcome.grad_norm,
                             progress_.tokens_seen, step_tokens_per_s,
                             seconds_between(run_start_, Clock::now()),
                             progress_.skipped_steps, mfu, outcome.loss_scale};
      record.mem_bytes = memory.total;
      record.mem_peak_bytes = memory.total_peak;
      record.mem_peak = memory.peak;
      metrics->write(record);
      printer_.step(ProgressStep{step, total_steps, outcome.loss, outcome.lr, outcome.grad_norm,
                                 step_tokens_per_s,
                                 step_tokens_per_s * result.flops_per_token / 1e9,
                                 ema_step_seconds * static_cast<double>(total_steps - step),
                                 peak_rss_mb()});
    }
    kill_self_if_test_asks(step, world_.rank(), world_.size());
    stop_self_if_test_asks(step, world_.rank(), world_.size());
    if (!outcome.skipped) result.final_loss = outcome.loss;
    result.steps_this_run = steps_done;
    result.tokens_this_run += tokens_per_step;
    const bool last = step == total_steps;
    if ((data_.val || !benchmarks_.empty()) &&
        ((config_.training.eval_every > 0 && step % config_.training.eval_every == 0) || last)) {
      watch(step, "eval");
      const EvalRecord record = evaluate(step);
      if (root_) metrics->write(record);
      if (record.has_loss) result.final_val_loss = record.loss;
      watch(step, nullptr);
    }
    // Ranks receive a stop signal at slightly different times; they agree on the step.
    int32_t stop_signal = StopSignalGuard::signal_number();
    mesh_->world().all_reduce(Tensor(&stop_signal, DType::i32, Shape{1}), ReduceOp::max);
    const bool stop = stop_signal != 0;
    if ((config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0) || last || stop) {
      watch(step, "checkpoint save");
      save_checkpoint(stop);
      watch(step, nullptr);
    }
    step_span.end();
    profiler_.after_step(step, mesh_->traffic(), backend_->memory_snapshot());
    if (stop) {
      signals.keep_installed();
      result.stopped_by_signal = true;
      message(fmt::format("stopped by signal {} after step {}/{}; resume with: {}", stop_signal,
                          step, total_steps, options_.resume_command));
      break;
    }
  }
  profiler_.finish();
  for (const std::string& line : profiler_.summary_lines()) message(line);
  result.trace = profiler_.summaries();
  result.final_step = progress_.step;
  result.skipped_steps = progress_.skipped_steps;
  result.checkpoint_failures = checkpoint_failures_;
  result.last_checkpoint = last_checkpoint_;
  if (root_ && last_saved_step_ != progress_.step) {
    log_warn("[train] the run ends at step {} without a checkpoint of it ({})", progress_.step,
             last_checkpoint_.empty() ? std::string("it has no checkpoint at all")
                                      : "the newest is " + last_checkpoint_.string());
  }
  // Runs too short for a steady state report their overall rate.
  result.tokens_per_s = steady_seconds > 0 ? static_cast<double>(steady_tokens) / steady_seconds
                        : run_seconds > 0 ? static_cast<double>(result.tokens_this_run) / run_seconds
                                          : 0.0;
  result.gflops_per_s = result.tokens_per_s * result.flops_per_token / 1e9;
  if (steady_steps > 0) {
    result.step_seconds = steady_seconds / static_cast<double>(steady_steps);
    result.traffic_per_step = {
        steady_traffic.tp / steady_steps, steady_traffic.cp / steady_steps,
        steady_traffic.data / steady_steps,
        steady_traffic.dp / steady_steps, steady_traffic.fsdp / steady_steps};
  }
  result.peak_rss_mb = peak_rss_mb();
  result.peak_device_mb =
      static_cast<double>(backend_->memory_snapshot().total_peak) / (1024.0 * 1024.0);
  return result;
}

}  // namespace

TrainResult run_training(const TrainRunOptions& options) {
  Trainer trainer(options);
  return trainer.run();
}

std::string train_summary_json(const TrainResult& r) {
  nlohmann::ordered_json summary = {{"steps", r.final_step},
                                    {"steps_this_run", r.steps_this_run},
                                    {"tokens", r.tokens_this_run},
                                    {"tokens_per_s", r.tokens_per_s},
                                    {"flops_per_token", r.flops_per_token},
                                    {"gflops_per_s", r.gflops_per_s},
                                    {"step_seconds", r.step_seconds},
                                    {"comm_bytes_per_step",
                                     {{"tp", r.traffic_per_step.tp},
                                      {"cp", r.traffic_per_step.cp},
                                      {"data", r.traffic_per_step.data},
                                      {"dp", r.traffic_per_step.dp},
                                      {"fsdp", r.traffic_per_step.fsdp}}},
                                    {"peak_rss_mb", r.peak_rss_mb},
                                    {"peak_device_mb", r.peak_device_mb},
                                    {"final_loss", r.final_loss},
                                    {"final_val_loss", nullptr},
                                    {"stopped_by_signal", r.stopped_by_signal},
                                    {"skipped_steps", r.skipped_steps},
                                    {"checkpoint_failures", r.checkpoint_failures},
                                    {"run_dir", r.run_dir.string()}};
  if (r.final_val_loss >= 0) summary["final_val_loss"] = r.final_val_loss;
  if (!r.trace.empty()) {
    summary["trace"] = nlohmann::ordered_json::array();
    for (const TraceRankSummary& rank : r.trace)
      summary["trace"].push_back(trace_summary_json(rank));
  }
  return summary.dump();
}

}  // namespace anvil
