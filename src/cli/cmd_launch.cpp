// `anvil launch --nproc N [--hostfile F] [--max-restarts K] -- train|finetune <args>`: runs the
// training command on N ranks under mpirun and restarts it from the newest committed
// checkpoint when a rank dies (parallel/launcher.h). The run directory is fixed before the
// first start (a default one is chosen when <args> name none) so every restart continues the
// same run, and restarts always pass --resume auto. Variables named ANVIL_* and OMP_* are
// exported to every rank. With --min-nproc M < N the launch is elastic (launcher.h): the
// launcher owns --training.grad_accum and scales it with the world size. Before the first start
// on this host (no --hostfile) the job's own pre-flight memory check runs once for N ranks
// (`anvil train ... --preflight-only N`): a job that will not fit starts no rank. With a
// hostfile each rank checks its own memory as it starts. docs/distributed.md has the
// equivalent Slurm (srun) lines.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "parallel/launcher.h"
#include "train/run_dir.h"

extern char** environ;

namespace anvil::cli {
namespace {

// Returns the value of `--name value` or `--name=value` in args, or "".
std::string option_value(const std::vector<std::string>& args, const std::string& name) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name && i + 1 < args.size()) return args[i + 1];
    if (args[i].starts_with(name + "=")) return args[i].substr(name.size() + 1);
  }
  return "";
}

// Returns args without any `--name value` / `--name=value`.
std::vector<std::string> without_option(const std::vector<std::string>& args,
                                        const std::string& name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name) {
      ++i;
      continue;
    }
    if (args[i].starts_with(name + "=")) continue;
    out.push_back(args[i]);
  }
  return out;
}

std::string this_executable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  ANVIL_CHECK(!error, "[launch] cannot find the anvil executable (/proc/self/exe: {})",
              error.message());
  return self.string();
}

// Runs the job's pre-flight check for options.nproc ranks on this host (`anvil <job>
// --preflight-only N`) and returns its exit status; a refusal is printed by it.
int preflight_status(const LaunchOptions& options) {
  std::vector<std::string> args = {options.program};
  args.insert(args.end(), options.first_args.begin(), options.first_args.end());
  if (options.grad_accum > 0)
    args.push_back("--training.grad_accum=" + std::to_string(options.grad_accum));
  args.push_back("--preflight-only");
  args.push_back(std::to_string(options.nproc));
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int error =
      posix_spawn(&pid, options.program.c_str(), nullptr, nullptr, argv.data(), environ);
  ANVIL_CHECK(error == 0, "[launch] cannot start {} for the pre-flight check: {}",
              options.program, std::strerror(error));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    ANVIL_CHECK(errno == EINTR, "[launch] waiting for the pre-flight check: {}",
                std::strerror(errno));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

std::vector<std::string> exported_environment() {
  std::vector<std::string> out;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string variable(*entry);
    if (variable.starts_with("ANVIL_") || variable.starts_with("OMP_")) out.push_back(variable);
  }
  return out;
}

int run_launch_command(const std::vector<std::string>& raw_args) {
  std::vector<std::string> own_args;
  std::vector<std::string> job;
  bool after_separator = false;
  for (const std::string& arg : raw_args) {
    if (!after_separator && arg == "--") {
      after_separator = true;
    } else if (after_separator) {
      job.push_back(arg);
    } else {
      own_args.push_back(arg);
    }
  }
  CLI::App app("Run `anvil train` on N ranks under mpirun; restart it from the newest committed "
               "checkpoint when a rank dies.\nUsage: anvil launch --nproc N [options] -- train "
               "<train args>",
               "anvil launch");
  LaunchOptions options;
  app.add_option("--nproc", options.nproc, "number of ranks")->required();
  app.add_option("--hostfile", options.hostfile, "Open MPI hostfile (default: this machine)");
  app.add_option("--max-restarts", options.max_restarts,
                 "restarts allowed after a rank failure")->capture_default_str();
  app.add_option("--stop-timeout", options.stop_timeout_s,
                 "seconds ranks get to checkpoint after SIGTERM or SIGINT to the launcher")
      ->capture_default_str();
  app.add_option("--mpirun", options.mpirun, "the mpirun executable")->capture_default_str();
  app.add_option("--min-nproc", options.min_nproc,
                 "elastic: keep training on as few as M ranks when slots are lost, growing back "
                 "to N when they return (needs --training.grad_accum in the train arguments)");
  app.add_option("--health-check", options.health_check,
                 "elastic: shell command run per slot before each start and at each checkpoint "
                 "of a shrunk job, with ANVIL_SLOT=<slot>; exit 0 means the slot is usable");
  if (!parse_args(app, own_args)) return 0;
  ANVIL_CHECK(!job.empty() && (job.front() == "train" || job.front() == "finetune"),
              "[launch] give the training command (train or finetune) after '--', e.g. anvil "
              "launch --nproc 2 -- train --config configs/tiny.toml");

  if (option_value(job, "--run-dir").empty()) {
    const std::string config = option_value(job, "--config");
    const std::string name = !config.empty() ? std::filesystem::path(config).stem().string()
                             : job.front() == "finetune" ? "sft"
                                                         : "tiny";
    job.push_back("--run-dir");
    job.push_back(default_run_dir(name).string());
  }
  if (options.min_nproc > 0 && options.min_nproc < options.nproc) {
    // The launcher sets grad_accum on every start so that ranks x grad_accum stays the same.
    const std::string grad_accum = option_value(job, "--training.grad_accum");
    ANVIL_CHECK(!grad_accum.empty(), "[launch] --min-nproc {} < --nproc {} needs "
                "--training.grad_accum=G in the train arguments (G at {} ranks), so the global "
                "batch can be kept when the world changes", options.min_nproc, options.nproc,
                options.nproc);
    options.grad_accum = std::atoi(grad_accum.c_str());
    ANVIL_CHECK(options.grad_accum >= 1, "[launch] --training.grad_accum must be >= 1, got '{}'",
                grad_accum);
    job = without_option(job, "--training.grad_accum");
  } else {
    ANVIL_CHECK(options.health_check.empty(),
                "[launch] --health-check needs --min-nproc M < --nproc (elastic mode)");
  }
  options.program = this_executable();
  options.first_args = job;
  options.restart_args = without_option(job, "--resume");
  options.restart_args.push_back("--resume");
  options.restart_args.push_back("auto");
  options.exported_env = exported_environment();
  if (options.hostfile.empty() && preflight_status(options) != 0) return 1;
  return run_launch(options);
}

}  // namespace

ANVIL_COMMAND("launch", "run training on N ranks under mpirun, restarting after a rank failure",
              15, run_launch_command);

}  // namespace anvil::cli
