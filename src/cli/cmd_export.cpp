// `anvil export --run DIR [--checkpoint C] --out DIR [--merge] [--dtype f32|bf16]`: write a
// run's checkpoint in Hugging Face formats: a LoRA run's PEFT adapter (or, with --merge, the
// base with the adapters folded in), or a fully trained model. See train/finetune_export.h.
#include <string>

#include "cli/command.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "train/finetune_export.h"

namespace anvil::cli {
namespace {

int run_export(const std::vector<std::string>& args) {
  CLI::App app(
      "Export a run's checkpoint for the Hugging Face ecosystem: a PEFT adapter for a "
      "LoRA run (--merge: a full model with the adapters merged), a Hugging Face model "
      "for a full fine-tune or pretraining run.",
      "anvil export");
  ExportRequest request;
  std::string run_dir, checkpoint, out, dtype = "f32";
  auto* run_option = app.add_option("--run", run_dir, "run directory: its newest valid checkpoint");
  app.add_option("--checkpoint", checkpoint, "a checkpoint folder (default: the run's newest)")
      ->excludes(run_option);
  app.add_option("--out", out, "output directory (must not exist, or be empty)")->required();
  app.add_flag("--merge", request.merge,
               "LoRA runs: write the base model with W += (alpha/r) B A instead of the adapter");
  app.add_option("--dtype", dtype, "weights of an exported model: f32 or bf16 (adapters: f32)")
      ->capture_default_str();
  if (!parse_args(app, args)) return 0;
  ANVIL_CHECK(dtype == "f32" || dtype == "bf16", "[export] --dtype must be f32 or bf16, got '{}'",
              dtype);
  request.run_dir = run_dir;
  request.checkpoint = checkpoint;
  request.out = out;
  request.dtype = parse_dtype(dtype);
  log_info("{}", export_run(request));
  return 0;
}

}  // namespace

ANVIL_COMMAND("export",
              "export a run as a PEFT adapter or Hugging Face model (--merge: LoRA merged)", 72,
              run_export);

}  // namespace anvil::cli
