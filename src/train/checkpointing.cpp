// Checkpoint files of a training run (layout in checkpointing.h). The engine writes weights
// and optimizer shards (parallel/sharded_checkpoint.h), or, for LoRA, the optimizer shards
// beside a PEFT adapter written by world rank 0; this file adds the trainer's state and runs
// the multi-rank commit protocol.
#include "train/checkpointing.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/trace.h"
#include "io/file_util.h"
#include "model/hf_config.h"
#include "model/peft_adapter.h"
#include "parallel/collectives.h"
#include "parallel/sharded_checkpoint.h"
#include "train/base_model.h"
#include "train/train_state.h"

namespace anvil {
namespace {

constexpr const char* kStateFile = "train_state.json";
constexpr const char* kConfigFile = "config.toml";

// How one phase of a save went, agreed by every rank.
struct PhaseOutcome {
  bool failed = false;
  bool diverged = false;  // the failure was a DivergenceError (non-finite weights)
  std::string reason;     // the lowest failing rank's message
};

// Runs `phase` on this rank, then agrees with every rank whether all succeeded; on failure
// every rank gets the lowest failing rank's message. The all-reduce doubles as the barrier
// between phases. Any exception counts: a rank must never leave its peers in a collective.
template <typename Phase>
PhaseOutcome agreed_phase(Communicator& world, Phase&& phase) {
  std::string reason;
  int32_t diverged = 0;
  try {
    phase();
  } catch (const DivergenceError& e) {
    reason = e.what();
    diverged = 1;
  } catch (const std::exception& e) {
    reason = e.what()[0] != '\0' ? e.what() : "unknown error";
  }
  // max over (size - rank) picks the lowest failing rank; 0: nobody failed.
  int32_t flags[2] = {reason.empty() ? 0 : world.size() - world.rank(), diverged};
  world.all_reduce(Tensor(flags, DType::i32, Shape{2}), ReduceOp::max);
  PhaseOutcome outcome;
  if (flags[0] == 0) return outcome;
  outcome.failed = true;
  outcome.diverged = flags[1] != 0;
  outcome.reason = reason;
  broadcast_string(world, outcome.reason, world.size() - flags[0]);
  return outcome;
}

}  // namespace

std::filesystem::path CheckpointStore::save(DataParallelEngine& engine,
                                            const TrainProgress& progress,
                                            const TrainConfig& config) {
  Communicator& world = engine.mesh().world();
  const bool root = world.rank() == 0;
  TraceSpan span("checkpoint save", "checkpoint");
  span.arg("step", progress.step);
  PhaseOutcome outcome = agreed_phase(world, [&] {
    if (root) manager_.prepare(progress.step);
  });
  if (!outcome.failed) {
    outcome = agreed_phase(world, [&] {
      TraceSpan write_span("checkpoint write", "checkpoint");
      write_files(engine, progress, config);
    });
  }
  if (!outcome.failed) {
    outcome = agreed_phase(world, [&] {
      if (root) manager_.commit(progress.step, {{"tokens_seen", progress.tokens_seen}});
    });
  }
  if (!outcome.failed) return manager_.committed_dir(progress.step);

  // Rank 0 removes what the save left and says what the run still has; every rank throws
  // the same message.
  std::string message;
  if (root) {
    manager_.abandon(progress.step);
    const std::vector<int64_t> committed = manager_.committed_steps();
    message = fmt::format("[checkpoint] cannot save step {}: {}; its partial files were removed "
                          "and {}", progress.step, outcome.reason,
                          committed.empty()
                              ? std::string("the run has no committed checkpoint yet")
                              : CheckpointManager::step_dir_name(committed.back()) +
                                    " is still the newest checkpoint");
  }
  broadcast_string(world, message, 0);
  if (outcome.diverged) throw DivergenceError(message, __FILE__, __LINE__);
  throw CheckpointSaveError(message, __FILE__, __LINE__);
}

void CheckpointStore::write_files(DataParallelEngine& engine, const TrainProgress& progress,
                                  const TrainConfig& config) {
  const bool root = engine.mesh().world().rank() == 0;
  const std::filesystem::path staging = manager_.staging_dir(progress.step);
  const bool lora = engine.model().lora_enabled();
  if (lora) {
    // The adapters are gathered from their shards (stage 3) and world rank 0 writes them.
    write_engine_adapter(engine, staging, config.model.init_from);
    if (root) write_base_record(staging, config.model.init_from);
    write_engine_optimizer(engine, staging);
  } else {
    write_engine_checkpoint(engine, staging);
  }
  if (root) {
    // Every random choice of a run is a pure function of (seed, index): weight init of
    // (seed, name, element), data order of (seed, epoch). The seed is the whole RNG state.
    const MeshShape& mesh = engine.mesh().shape();
    nlohmann::json state = {{"step", progress.step},
                                  {"optimizer_step", engine.optimizer_steps()},
                                  {"scheduler_step", progress.step},
                                  {"skipped_steps", progress.skipped_steps},
                                  {"consecutive_skipped_steps", progress.consecutive_skipped},
                                  {"tokens_seen", progress.tokens_seen},
                                  {"train_seconds", progress.train_seconds},
                                  {"data_cursor", progress.cursor.to_json()},
                                  {"rng", {{"seed", config.training.seed}}},
                                  {"mesh",
                                   {{"world", engine.mesh().sample_world()},
                                    {"dp", mesh.dp},
                                    {"fsdp", mesh.fsdp},
                                    {"cp", mesh.cp},
                                    {"zero_stage", engine.zero_stage()}}}};
    if (progress.loss_scale) {
      state["loss_scale"] = {{"scale", progress.loss_scale->scale},
                             {"clean_steps", progress.loss_scale->clean_steps}};
    }
    write_file_atomic(staging / kStateFile, state.dump(2) + "\n");
    write_file_atomic(staging / kConfigFile, config_to_toml(config));
    // config.json beside model.safetensors makes the folder loadable as a Hugging Face model;
    // a LoRA checkpoint is a PEFT adapter folder instead (its base is model.init_from).
    if (!lora) {
      write_hf_config_json(staging / "config.json", hf_config_from_llama(engine.model().config()),
                           "float32");
    }
  }
}

std::optional<std::filesystem::path> CheckpointStore::latest_valid() const {
  const std::optional<LoadedCheckpoint> latest = manager_.find_latest_valid();
  if (!latest) return std::nullopt;
  return latest->dir;
}

std::optional<std::filesystem::path> select_resume_checkpoint(const std::string& resume,
                                                              const CheckpointStore& store,
                                                              Communicator& world) {
  std::string chosen;
  if (world.rank() == 0) {
    std::optional<std::filesystem::path> dir;
    if (resume == "auto") {
      dir = store.latest_valid();
    } else if (resume != "never") {
      dir = CheckpointManager::load(resume).dir;
    }
    if (dir) chosen = dir->string();
  }
  broadcast_string(world, chosen, 0);
  if (chosen.empty()) return std::nullopt;
  return std::filesystem::path(chosen);
}

TrainProgress load_checkpoint(const std::filesystem::path& dir, DataParallelEngine& engine) {
  if (engine.model().lora_enabled()) {
    read_engine_adapter(engine, dir);
    read_engine_optimizer(engine, dir);
  } else {
    read_engine_checkpoint(engine, dir);
  }
  const std::string state_path = (dir / kStateFile).string();
  const TrainStateFile state = parse_train_state(read_file(dir / kStateFile), state_path);
  const TrainProgress& progress = state.progress;
  const int64_t optimizer_step = state.optimizer_step;
  const int64_t applied = progress.step - progress.skipped_steps;
  ANVIL_CHECK(optimizer_step == applied && engine.optimizer_steps() == applied,
              "[checkpoint] {}: optimizer step {} (optimizer files: {}) differs from training "
              "step {} less {} skipped steps",
              state_path, optimizer_step, engine.optimizer_steps(), progress.step,
              progress.skipped_steps);
  return progress;
}

std::string read_checkpoint_config(const std::filesystem::path& dir) {
  return read_file(dir / kConfigFile);
}

}  // namespace anvil
