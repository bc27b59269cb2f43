// `anvil finetune --model <hf-dir> --data <file.jsonl|shard-dir>`: supervised fine-tuning with
// LoRA adapters (default) or of every weight (--full). JSONL is rendered with the chat template
// into <run-dir>/data first; the run then trains like `anvil train` (checkpoints, exact resume,
// mpirun / anvil launch, SIGINT/SIGTERM), and at the end world rank 0 writes the result into
// the run directory: adapter/ (a PEFT adapter) for LoRA, hf/ (a Hugging Face model) for --full.
// Running the same command again continues the run from its newest checkpoint.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <optional>

#include "backend/registry.h"
#include "cli/command.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/log.h"
#include "model/parameter_table.h"
#include "parallel/collectives.h"
#include "plan/preflight.h"
#include "train/config.h"
#include "train/finetune.h"
#include "train/finetune_export.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace anvil::cli {
namespace {

namespace fs = std::filesystem;

// The LoRA paragraph of the help text; the target names come from the parameter table.
std::string lora_help() {
  return fmt::format(
      R"(
LoRA (default): the base weights are frozen (held in bf16 with --training.dtype=bf16, or as
--lora.base_dtype says) and only the adapters train: --lora.r 8 --lora.alpha 16
--lora.dropout 0.05
--lora.targets={} by default; the targets may be any of
{}.
--full trains every weight instead (it takes no --lora.* flags). --adapter DIR continues a PEFT
adapter (made by anvil or by peft): its settings and values start the run.
)",
      fmt::join(default_lora_targets(), ","), fmt::join(lora_module_names(), " "));
}

constexpr const char* kFooter = R"(
Data: a .jsonl file (plain or gzip/zstd/xz compressed, e.g. chats.jsonl.zst) of chat records
{"messages": [{"role": "user", "content": ...}, ...]} or alpaca records {"instruction", "input",
"output"}, rendered with --chat-template (default: the tokenizer's, see docs/finetune.md) with
the loss on assistant tokens only, or a folder made by `anvil prepare --sft`. 5% of the JSONL
examples are held out for validation.

Defaults: lr 2e-4 (LoRA) / 2e-5 (full), cosine to 0 after 3% warmup, no weight decay, batch 4,
seq_len min(512, the model's context), packed examples with document masks, --epochs 3 unless
--training.steps is set. Any configuration key works as --section.key=value (see
anvil train --help for the list).

Several processes: mpirun -np N anvil finetune ... or anvil launch --nproc N -- finetune ...
LoRA and full fine-tunes run on any parallel.zero_stage (0-3) and dp x fsdp mesh; under stage 3
the frozen base is sharded too (each rank holds 1/fsdp of it). The run prints (and writes to
<run-dir>/sharding.json) how every tensor is cut and each rank's memory; --dry-run does only
that.

Output: <run-dir>/adapter (PEFT adapter_config.json + adapter_model.safetensors) or
<run-dir>/hf (full model); `anvil export --run DIR --out D [--merge]` exports any checkpoint.
)";

int run_finetune(const std::vector<std::string>& raw_args) {
  std::vector<std::string> args = raw_args;
  FinetuneRequest request;
  request.overrides = extract_config_overrides(args);
  CLI::App app(
      "Fine-tune a Hugging Face model on instruction data: LoRA adapters by default, "
      "every weight with --full.",
      "anvil finetune");
  std::string model_dir, run_dir_arg, backend = "cpu";
  app.add_option("--model", model_dir, "base model: a Hugging Face model directory")->required();
  app.add_option("--data", request.data,
                 "SFT data: a .jsonl file (chat or alpaca records) or a shard folder from "
                 "`anvil prepare --sft` (not needed when resuming)");
  app.add_flag("--full", request.full, "train every weight instead of LoRA adapters");
  app.add_option("--adapter", request.adapter,
                 "PEFT adapter folder to continue training (its r, alpha, dropout, targets and "
                 "values; sets lora.init_from)");
  app.add_option("--config", request.config_path, "TOML file applied over the SFT defaults");
  app.add_option("--run-dir", run_dir_arg, "run directory (default: runs/sft-<time>)");
  app.add_option("--chat-template", request.chat_template,
                 "llama3, chatml, llama2 or plain (default: from the tokenizer)");
  app.add_option("--epochs", request.epochs,
                 "passes over the training data (unless "
                 "--training.steps is set)")
      ->capture_default_str();
  app.add_option("--packing", request.packing,
                 "JSONL: true packs examples back to back (document masks keep them apart); "
                 "false pads each example to whole windows of training.seq_len")
      ->capture_default_str();
  add_max_record_bytes_option(app, request.max_record_bytes, "JSONL record (line)");
  app.add_option("--resume", request.resume,
                 "auto: continue from the newest valid checkpoint; never; or a checkpoint folder")
      ->capture_default_str();
  app.add_option("--backend", backend, backend_choices())->capture_default_str();
  bool dry_run = false;
  app.add_flag("--dry-run", dry_run,
               "prepare the data, build the model and the parallel engine, print the sharding "
               "and memory report (also <run-dir>/sharding.json) and exit without training");
  ThreadOption threads;
  threads.add_to(app);
  PreflightOption preflight;
  preflight.add_to(app);
  int preflight_only = 0;
  app.add_option("--preflight-only", preflight_only,
                 "only check the memory of a job of N ranks on this host (they share its "
                 "memory), then exit: what anvil launch runs before it starts the ranks (a "
                 ".jsonl --data is prepared into the run directory first, as the job would)");
  app.footer(lora_help() + kFooter);
  if (!parse_args(app, args)) return 0;
  threads.configure();
  preflight.apply_to(request.overrides);
  if (preflight_only > 0) {
    request.model_dir = model_dir;
    request.run_dir = run_dir_arg.empty() ? default_run_dir("sft") : fs::path(run_dir_arg);
    const RunDirLock lock(request.run_dir);
    run_launch_preflight(resolve_finetune_config(request, anvil::world()), backend,
                         preflight_only);
    return 0;
  }

  Communicator& world = anvil::world();
  const bool root = world.rank() == 0;
  if (run_dir_arg.empty()) {
    if (root) run_dir_arg = default_run_dir("sft").string();
    broadcast_string(world, run_dir_arg, 0);
  }
  request.model_dir = model_dir;
  request.run_dir = run_dir_arg;
  // Held until the command returns (data preparation and the final export write into the run
  // directory too); a second run on the same directory stops here.
  std::optional<RunDirLock> lock;
  if (root) lock.emplace(request.run_dir);

  TrainRunOptions options;
  options.config = resolve_finetune_config(request, world);
  options.run_dir = request.run_dir;
  options.resume = request.resume;
  options.backend = backend;
  options.resume_command = fmt::format("anvil finetune --model {} --run-dir {}",
                                       shell_quote(model_dir), shell_quote(run_dir_arg));
  options.world = &world;
  options.dry_run = dry_run;
  options.preflight = run_preflight;
  const bool lora = options.config.lora.r > 0;
  const TrainResult result = run_training(options);
  if (!root || dry_run) return 0;
  if (result.steps_this_run > 0) {
    log_info("trained steps {}-{}: final loss {:.4f}{} | {:.0f} tokens/s | peak RSS {:.0f} MB",
             result.final_step - result.steps_this_run + 1, result.final_step, result.final_loss,
             result.final_val_loss >= 0 ? fmt::format(", val loss {:.4f}", result.final_val_loss)
                                        : std::string(),
             result.tokens_per_s, result.peak_rss_mb);
  }
  if (!result.stopped_by_signal && !result.last_checkpoint.empty()) {
    const fs::path out = request.run_dir / (lora ? "adapter" : "hf");
    std::error_code ignored;
    fs::remove_all(out, ignored);  // the export of an earlier, shorter leg of this run
    ExportRequest export_request;
    export_request.checkpoint = result.last_checkpoint;
    export_request.out = out;
    log_info("{}", export_run(export_request));
    const std::string try_it =
        lora ? fmt::format("anvil generate --model {} --adapter {} --chat", shell_quote(model_dir),
                           shell_quote(out.string()))
             : fmt::format("anvil generate --model {} --chat", shell_quote(out.string()));
    log_info("try it: {}", try_it);
  }
  if (options.config.logging.json) fmt::print("{}\n", train_summary_json(result));
  std::fflush(stdout);
  return 0;
}

}  // namespace

ANVIL_COMMAND("finetune", "fine-tune an HF model on chat/instruction JSONL (LoRA, or --full)", 12,
              run_finetune);

}  // namespace anvil::cli
