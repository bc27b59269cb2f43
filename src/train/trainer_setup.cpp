// Building and resuming a training run (the Trainer of trainer_state.h): the backend, the
// device communicator and mesh, the model and the parallel engine from the configuration;
// then either the newest usable checkpoint (with the loss scaler's state and the data
// cursor) or the initial weights (random, a Hugging Face folder or safetensors file, or a
// frozen LoRA base with fresh or given adapters). Collective: every rank runs it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <variant>

#include "comm/blocking_communicator.h"
#include "comm/device_communicator.h"
#include "core/error.h"
#include "core/log.h"
#include "io/file_util.h"
#include "model/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/peft_adapter.h"
#include "parallel/sharded_checkpoint.h"
#include "parallel/sharding_report.h"
#include "train/base_model.h"
#include "train/model_setup.h"
#include "train/trainer_state.h"

namespace anvil {
namespace {

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

}  // namespace

Trainer::Trainer(const TrainRunOptions& options)
    : options_(options),
      config_(options.config),
      world_(options.world != nullptr ? *options.world : anvil::world()),
      root_(world_.rank() == 0),
      watchdog_(make_watchdog(options.config, world_)),
      run_{options.run_dir},
      backend_(make_backend(options.backend)),
      planned_peak_bytes_(options.preflight ? options.preflight(options.config, *backend_, world_) : 0),
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
      benchmarks_(options.config, root_),
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
                  ? " (fp16 runs on cpu, cpu-ref and sim; use bf16 on this backend)"
                  : "");
  device_world_ = make_device_communicator(world_, *backend_);
  if (!config_.parallel.overlap) {
    device_world_ = device_world_ ? std::make_unique<BlockingCommunicator>(std::move(device_world_))
                                  : std::make_unique<BlockingCommunicator>(world_);
  }
  mesh_ = std::make_unique<DeviceMesh>(device_world_ ? *device_world_ : world_,
                                       config_.parallel);
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
    if (progress_.saved_world > 0 && progress_.saved_world != mesh_->sample_world()) {
      world_change_ = WorldChangeRecord{progress_.step, mesh_->sample_world(),
                                        progress_.saved_world};
      message(fmt::format("world changed {} -> {} at step {}", progress_.saved_world,
                          mesh_->sample_world(), progress_.step));
    }
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

void Trainer::report_sharding() {
  const ShardingReport report = sharding_report(*engine_);  // collective
  message(report.text);
  if (root_) write_file_atomic(run_.root / kShardingReportFile, report.json.dump(2) + "\n");
}

}  // namespace anvil
