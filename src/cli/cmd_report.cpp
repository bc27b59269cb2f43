// `anvil report RUN [--out FILE]`: one self-contained HTML page for a run directory (charts
// of the metrics over steps, the last values, the sharding report and the configuration);
// see observe/run_report.h. The default output is RUN/report.html.
#include <filesystem>
#include <string>

#include "cli/command.h"
#include "core/log.h"
#include "observe/run_report.h"
#include "train/config.h"

namespace anvil::cli {
namespace {

int run_report(const std::vector<std::string>& args) {
  CLI::App app(
      "Write one self-contained HTML page for a run directory: charts over steps of the train "
      "and validation loss, learning rate, gradient norm, tokens/s, MFU, memory and evaluation "
      "scores (every series metrics.jsonl holds), the last values, the sharding and memory "
      "report and the configuration. The page has no script and loads nothing from elsewhere.",
      "anvil report");
  std::string run_dir, out;
  app.add_option("run", run_dir, "run directory (of anvil train or anvil finetune)")->required();
  app.add_option("--out", out, "output HTML file (default: RUN/report.html)");
  if (!parse_args(app, args)) return 0;
  const std::filesystem::path target =
      out.empty() ? std::filesystem::path(run_dir) / "report.html" : std::filesystem::path(out);
  write_run_report(run_dir, config_to_toml(TrainConfig{}), target);
  log_info("wrote {}", target.string());
  return 0;
}

}  // namespace

ANVIL_COMMAND("report", "render a run directory as one HTML page (charts, config)", 45,
              run_report);

}  // namespace anvil::cli
