// `anvil train`: pretrain a Llama-family model. Options: --config FILE, --run-dir DIR,
// --resume auto|never|PATH, --backend, --threads, and any config key as --section.key=value.
// With no arguments it trains the tiny preset (the defaults) on the fortunes sample corpus,
// preparing that corpus first when needed. The resolved config of a run lives in its run
// directory, so `anvil train --run-dir DIR` alone continues a run where it stopped. Under
// mpirun (or `anvil launch`) every rank runs this command; rank 0 picks the default run
// directory and prepares the corpus, and only rank 0 prints.
#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "backend/registry.h"
#include "cli/command.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/log.h"
#include "model/tensor_parallel.h"
#include "parallel/collectives.h"
#include "parallel/mesh.h"
#include "plan/preflight.h"
#include "train/config.h"
#include "train/model_setup.h"
#include "train/run_dir.h"
#include "train/sample_corpus.h"
#include "train/trainer.h"

namespace anvil::cli {
namespace {

std::string config_keys_help() {
  std::string text = "\nConfiguration keys (set in the TOML file or as --section.key=value):\n";
  TrainConfig defaults;
  for (const ConfigField& field : config_fields()) {
    text += fmt::format("  --{:<34} {} (default {})\n", field.full_name(), field.help,
                        config_value_text(defaults, field));
  }
  return text;
}

// Returns the run name used in a default run directory: the config file's stem, else "tiny".
std::string run_name(const std::string& config_path) {
  if (config_path.empty()) return "tiny";
  return std::filesystem::path(config_path).stem().string();
}

TrainConfig resolve_config(const std::string& config_path, const std::filesystem::path& run_dir,
                           const std::string& resume,
                           const std::vector<ConfigOverride>& overrides) {
  TrainConfig config;
  const std::filesystem::path saved = run_dir / "config.toml";
  if (!config_path.empty()) {
    apply_config_file(config, config_path);
  } else if (resume != "never" && std::filesystem::exists(saved)) {
    apply_config_file(config, saved.string());
  }
  for (const ConfigOverride& o : overrides) apply_config_override(config, o.name, o.value);
  validate_config(config);
  return config;
}

// The mesh the world size gives, and tensor parallelism's split of the model's widths.
void check_config_fits_world(const TrainConfig& config, int world_size) {
  const MeshShape shape = resolve_mesh_shape(config.parallel, world_size);
  tp_shard_config(llama_config_from(config.model), shape.tp);
}

std::string resume_command(const std::filesystem::path& run_dir, const std::string& backend,
                           int threads) {
  std::string command = "anvil train --run-dir " + shell_quote(run_dir.string());
  if (backend != "cpu") command += " --backend " + shell_quote(backend);
  if (threads > 0) command += fmt::format(" --threads {}", threads);
  return command;
}

int run_train(const std::vector<std::string>& raw_args) {
  std::vector<std::string> args = raw_args;
  const std::vector<ConfigOverride> overrides = extract_config_overrides(args);
  CLI::App app(
      "Pretrain a Llama-family model. With no arguments: the tiny demo on the fortunes "
      "corpus (prepared on first use).",
      "anvil train");
  std::string config_path;
  std::string run_dir_arg;
  std::string resume = "auto";
  std::string backend = "cpu";
  app.add_option("--config", config_path,
                 "TOML config (default: the tiny preset, or the run "
                 "directory's config.toml when resuming)");
  app.add_option("--run-dir", run_dir_arg, "run directory (default: runs/<config>-<time>)");
  app.add_option("--resume", resume,
                 "auto: continue from the newest valid checkpoint of the run directory; never; "
                 "or a checkpoint folder")
      ->capture_default_str();
  app.add_option("--backend", backend, backend_choices())->capture_default_str();
  bool dry_run = false;
  app.add_flag("--dry-run", dry_run,
               "build the model, the parallel engine and the data, print the sharding and "
               "memory report (also <run-dir>/sharding.json) and exit without training");
  ThreadOption threads;
  threads.add_to(app);
  PreflightOption preflight;
  preflight.add_to(app);
  int preflight_only = 0;
  app.add_option("--preflight-only", preflight_only,
                 "only check the memory of a job of N ranks on this host (they share its "
                 "memory), then exit: what anvil launch runs before it starts the ranks");
  app.footer(config_keys_help());
  if (!parse_args(app, args)) return 0;
  threads.configure();
  std::vector<ConfigOverride> all_overrides = overrides;
  preflight.apply_to(all_overrides);
  if (preflight_only > 0) {
    // Nothing is locked, prepared or written: the ranks do that once they start.
    run_launch_preflight(resolve_config(config_path, run_dir_arg,
                                        run_dir_arg.empty() ? "never" : resume, all_overrides),
                         backend, preflight_only);
    return 0;
  }

  Communicator& world = anvil::world();
  const bool root = world.rank() == 0;
  if (run_dir_arg.empty()) {
    // The default name holds the time; every rank must use rank 0's.
    if (root) run_dir_arg = default_run_dir(run_name(config_path)).string();
    broadcast_string(world, run_dir_arg, 0);
  }
  const std::filesystem::path run_dir(run_dir_arg);
  TrainRunOptions options;
  // Every check the configuration and the world size decide runs before rank 0 creates the
  // run directory: a rank that fails aborts the world, and the abort can kill rank 0 before
  // it removes a folder it created (reading a saved config.toml needs no lock).
  options.config = resolve_config(config_path, run_dir, resume, all_overrides);
  check_config_fits_world(options.config, world.size());
  // Held until the command returns; a second run on the same directory stops here.
  std::optional<RunDirLock> lock;
  if (root) lock.emplace(run_dir);
  options.run_dir = run_dir;
  options.resume = resume;
  options.backend = backend;
  options.resume_command = resume_command(run_dir, backend, threads.value);
  options.world = &world;
  options.dry_run = dry_run;
  options.preflight = run_preflight;

  if (root && !options.config.data.synthetic && options.config.data.sources.empty() &&
      options.config.data.tokenizer.empty() &&
      sample_corpus_needs_preparing(options.config.data.path)) {
    prepare_sample_corpus(options.config.data.path,
                          static_cast<int>(options.config.model.vocab_size));
  }
  world.barrier();

  const TrainResult result = run_training(options);
  if (!root || dry_run) return 0;
  if (result.steps_this_run > 0) {
    log_info("trained steps {}-{}: final loss {:.4f}{} | {:.0f} tokens/s ({:.1f} GFLOP/s) | peak "
             "RSS {:.0f} MB",
             result.final_step - result.steps_this_run + 1, result.final_step, result.final_loss,
             result.final_val_loss >= 0 ? fmt::format(", val loss {:.4f}", result.final_val_loss)
                                        : std::string(),
             result.tokens_per_s, result.gflops_per_s, result.peak_rss_mb);
  }
  log_info("run directory: {}", result.run_dir.string());
  if (!result.last_checkpoint.empty()) {
    log_info("try it: anvil generate --run {} --prompt \"The \"",
             shell_quote(result.run_dir.string()));
  }
  if (options.config.logging.json) fmt::print("{}\n", train_summary_json(result));
  std::fflush(stdout);
  return 0;
}

}  // namespace

ANVIL_COMMAND("train", "pretrain a model (no arguments: the tiny demo on the fortunes corpus)", 10,
              run_train);

}  // namespace anvil::cli
