// The supervisor behind `anvil launch`: runs a job under mpirun, relays its output (rank 0's
// lines as they are, other ranks' prefixed "[rank N]"), and when a rank dies (crash, signal,
// non-zero exit: mpirun then ends the whole job) names the rank and the reason and starts the
// job again with the restart command (which resumes from the newest committed checkpoint),
// until the restart budget is spent. SIGINT/SIGTERM to the launcher become one SIGUSR1 to
// mpirun, which forwards it to every rank (the trainer stops on it like on SIGTERM: finish the
// step, checkpoint, exit); after `stop_timeout_s` the job is ended, and a second signal kills
// it at once. A job that ends with status kExitDiverged (core/divergence_error.h: training
// diverged) is not restarted, since it would only diverge again; the launcher exits with that
// status. A job whose ranks stopped cleanly on a signal the launcher did not send (SIGTERM to
// one rank) is unfinished and restarted like a failed one. mpirun runs in its own process group
// so a terminal's Ctrl-C reaches it only through the launcher, and it dies with the launcher
// (PR_SET_PDEATHSIG), ending its ranks, so a killed launcher leaves no job running behind it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

struct LaunchOptions {
  int nproc = 1;
  std::string hostfile;  // empty: every rank on this machine
  int max_restarts = 0;
  int stop_timeout_s = 120;
  std::string mpirun = "mpirun";
  std::string program;                       // the executable every rank runs
  std::vector<std::string> first_args;       // its arguments on the first start
  std::vector<std::string> restart_args;     // and on every restart
  std::vector<std::string> exported_env;     // NAME=value pairs every rank must see
  // Elastic mode (min_nproc < nproc): before each start the launcher finds the usable slots
  // (ranks' places, 0..nproc-1) with `health_check` (run by /bin/sh per slot with ANVIL_SLOT
  // set; exit 0 within health_check_timeout_s: usable) or, without one, by dropping slots whose rank failed at
  // start-up, and starts the largest world >= min_nproc that keeps the global batch (ranks x
  // grad_accum = nproc x grad_accum) integral. While the world is smaller than nproc it checks
  // the lost slots at each checkpoint and, when they are back, stops the job gracefully and
  // starts it bigger. `grad_accum` (> 0 in elastic mode) is the job's training.grad_accum at
  // nproc ranks; each start gets `--training.grad_accum=<scaled value>` after its arguments.
  int min_nproc = 0;  // 0: nproc
  std::string health_check;
  int health_check_timeout_s = 60;  // a check still running then has failed
  int grad_accum = 0;
};

// Returns the largest world size in [min_nproc, usable] that divides nproc x grad_accum (the
// global batch in micro-batches stays the same), or 0 when there is none.
int elastic_world(int nproc, int min_nproc, int grad_accum, int usable);

// Returns mpirun's argv for one start: -np, the hostfile, --oversubscribe,
// --allow-run-as-root when `as_root`, --tag-output, -x for each exported variable and
// ANVIL_LAUNCH_ATTEMPT=<attempt>, then the program and `args`.
std::vector<std::string> mpirun_command(const LaunchOptions& options, int attempt, bool as_root,
                                        const std::vector<std::string>& args);

// One line of mpirun's --tag-output stream: "[1,3]<stderr>:text" is rank 3's stderr.
struct TaggedLine {
  int rank = -1;  // -1: mpirun's own line
  bool is_stderr = false;
  std::string text;
};
// Splits a tag off a line; lines without one are mpirun's own.
TaggedLine parse_tagged_line(std::string_view line);

// What mpirun says about a dead rank.
struct RankFailure {
  int rank = -1;
  std::string reason;  // "killed by signal 9 (Killed)", "exited with code 3", ...
};
// Recognises mpirun's report of a failed rank in one of its own lines; `pending_rank` carries
// the rank of a "Process name: [[job,1],R]" line to the "Exit code:" line that follows it.
std::optional<RankFailure> parse_mpirun_failure(std::string_view line, int& pending_rank);

// Returns the step number of a trainer progress line ("step  7/20 | loss ..."), or -1.
long progress_step(std::string_view line);
// Returns the step of a trainer's "checkpoint <dir>/step-NNNNNNN (...)" line, or -1.
long checkpoint_line_step(std::string_view line);

// Runs the job until it succeeds, is stopped by a signal, diverges, or fails with no restart
// left; returns the launcher's exit status (0 on success or a clean stop, kExitDiverged when
// training diverged, else 1).
int run_launch(const LaunchOptions& options);

}  // namespace anvil
