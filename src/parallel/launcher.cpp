// The launch supervisor (see launcher.h): fork/exec of mpirun with its output on a pipe, a
// poll loop that relays lines and watches for failures and signals, and the restart policy.
#include "parallel/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <regex>
#include <set>

#include "core/divergence_error.h"
#include "core/error.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_stop_signals{0};

void on_stop_signal(int) { g_stop_signals.fetch_add(1); }

// Installs the launcher's SIGINT/SIGTERM handlers for its lifetime.
class SignalGuard {
 public:
  SignalGuard() {
    g_stop_signals.store(0);
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  struct sigaction previous_int_;
  struct sigaction previous_term_;
};

int parse_int(std::string_view text) {
  int value = -1;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

void log_launch(const std::string& line) {
  fmt::print(stderr, "anvil launch: {}\n", line);
  std::fflush(stderr);
}

// One run of mpirun: its process, the read end of its output pipe, and what was seen.
class JobRun {
 public:
  // `failure_time` and `last_step_time` (when the previous run's rank 0 last finished a step)
  // are what a recovering run measures its recovery from.
  JobRun(const std::vector<std::string>& argv, bool recovering, Clock::time_point failure_time,
         Clock::time_point last_step_time)
      : recovering_(recovering), failure_time_(failure_time), last_step_time_(last_step_time) {
    int fds[2];
    ANVIL_CHECK(pipe2(fds, O_CLOEXEC) == 0, "[launch] cannot create a pipe: {}",
                std::strerror(errno));
    const pid_t launcher = getpid();
    pid_ = fork();
    ANVIL_CHECK(pid_ >= 0, "[launch] cannot fork: {}", std::strerror(errno));
    if (pid_ == 0) exec_child(argv, fds[1], launcher);
    close(fds[1]);
    fd_ = fds[0];
  }
  ~JobRun() {
    if (fd_ >= 0) close(fd_);
  }
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  // Relays output until mpirun exits; returns its wait status.
  int supervise(int stop_timeout_s);

  // Makes rank 0's checkpoint lines call `check` (the elastic grow test); when it returns
  // true the job is stopped gracefully (SIGUSR1) so the launcher can start it bigger.
  void grow_when(std::function<bool()> check) { grow_check_ = std::move(check); }
  bool grow_requested() const { return grow_requested_; }
  // Returns the step of the newest checkpoint rank 0 reported, or `fallback` if none.
  long committed_step(long fallback) const { return committed_step_ >= 0 ? committed_step_ : fallback; }
  // Returns whether rank 0 finished a step in this run.
  bool stepped() const { return last_step_seen_.has_value(); }

  const std::optional<RankFailure>& failure() const { return failure_; }
  Clock::time_point failure_seen() const { return failure_seen_; }
  bool stop_forwarded() const { return forwarded_signals_ > 0; }
  bool clean_stop_reported() const { return clean_stop_; }
  // Returns when rank 0 last reported a finished step (`fallback` if it never did).
  Clock::time_point last_step_seen(Clock::time_point fallback) const {
    return last_step_seen_ ? *last_step_seen_ : fallback;
  }

 private:
  [[noreturn]] static void exec_child(const std::vector<std::string>& argv, int out_fd,
                                      pid_t launcher) {
    setpgid(0, 0);
    // A launcher that dies (SIGKILL, OOM) must take its job with it: otherwise the ranks
    // train on unsupervised and hold the run directory against the launch that reruns it.
    // mpirun ends its ranks when it dies. The getppid check closes the race with a launcher
    // that died before prctl.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(128 + SIGKILL);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    const std::string message =
        fmt::format("anvil launch: cannot run {}: {}\n", argv[0], std::strerror(errno));
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, message.data(), message.size());
    _exit(127);
  }

  // mpirun forwards SIGUSR1 to every rank untouched (its own SIGTERM handling kills ranks a
  // second later), so a stop request travels as SIGUSR1; SIGTERM to mpirun is the fallback
  // once the ranks have had stop_timeout_s.
  void forward_signals(int stop_timeout_s) {
    const int received = g_stop_signals.load();
    if (received != forwarded_signals_) {
      if (forwarded_signals_ == 0) {
        log_launch(fmt::format("stopping: every rank finishes its step and writes a checkpoint "
                               "(up to {} s; signal again to kill the job at once)",
                               stop_timeout_s));
        kill(pid_, SIGUSR1);
        stop_sent_at_ = Clock::now();
      } else {
        log_launch("killing the job");
        kill(-pid_, SIGKILL);
        kill(pid_, SIGKILL);
      }
      forwarded_signals_ = received;
    }
    if (forwarded_signals_ == 1 && !stop_escalated_ &&
        Clock::now() - stop_sent_at_ > std::chrono::seconds(stop_timeout_s)) {
      log_launch(fmt::format("the ranks did not stop within {} s; ending the job", stop_timeout_s));
      kill(pid_, SIGTERM);
      stop_escalated_ = true;
    }
  }

  void handle_line(std::string_view raw);

  pid_t pid_ = -1;
  int fd_ = -1;
  bool recovering_;
  Clock::time_point failure_time_;
  Clock::time_point last_step_time_;
  std::optional<Clock::time_point> last_step_seen_;
  int forwarded_signals_ = 0;
  Clock::time_point stop_sent_at_;
  bool stop_escalated_ = false;
  int pending_rank_ = -1;
  bool clean_stop_ = false;
  bool recovery_reported_ = false;
  std::function<bool()> grow_check_;
  bool grow_requested_ = false;
  long committed_step_ = -1;
  std::optional<RankFailure> failure_;
  Clock::time_point failure_seen_;
  std::vector<std::string> last_error_;  // per rank: its last "anvil: error" line
};

void JobRun::handle_line(std::string_view raw) {
  const TaggedLine line = parse_tagged_line(raw);
  if (line.rank < 0) {
    fmt::print(stderr, "{}\n", line.text);
    if (!failure_) {
      std::optional<RankFailure> failure = parse_mpirun_failure(line.text, pending_rank_);
      if (failure) {
        failure_ = failure;
        failure_seen_ = Clock::now();
      }
    }
    return;
  }
  std::FILE* stream = line.is_stderr ? stderr : stdout;
  if (line.rank == 0) {
    fmt::print(stream, "{}\n", line.text);
  } else {
    fmt::print(stream, "[rank {}] {}\n", line.rank, line.text);
  }
  std::fflush(stream);
  if (line.text.starts_with("anvil: error:")) {
    if (last_error_.size() <= static_cast<size_t>(line.rank)) last_error_.resize(line.rank + 1);
    last_error_[static_cast<size_t>(line.rank)] = line.text;
  }
  if (line.rank == 0 && line.text.find("stopped by signal") != std::string::npos) {
    clean_stop_ = true;
  }
  const long saved = line.rank == 0 ? checkpoint_line_step(line.text) : -1;
  if (saved >= 0) {
    committed_step_ = saved;
    if (grow_check_ && !grow_requested_ && forwarded_signals_ == 0 && grow_check_()) {
      grow_requested_ = true;
      kill(pid_, SIGUSR1);
    }
  }
  const long step = line.rank == 0 ? progress_step(line.text) : -1;
  if (step < 0) return;
  const Clock::time_point now = Clock::now();
  last_step_seen_ = now;
  if (recovering_ && !recovery_reported_) {
    recovery_reported_ = true;
    // The second figure includes the time it took to notice the failure (a hang watchdog's
    // timeout), so it is the training time the failure cost.
    const auto seconds_since = [&](Clock::time_point then) {
      return std::chrono::duration<double>(now - then).count();
    };
    log_launch(fmt::format("recovered: step {} finished {:.1f} s after the failure was detected, "
                           "{:.1f} s after the last step before it",
                           step, seconds_since(failure_time_), seconds_since(last_step_time_)));
  }
}

int JobRun::supervise(int stop_timeout_s) {
  std::string pending;
  char buffer[4096];
  int status = 0;
  bool exited = false;
  Clock::time_point exited_at;
  for (;;) {
    forward_signals(stop_timeout_s);
    pollfd descriptor{fd_, POLLIN, 0};
    const int ready = poll(&descriptor, 1, 200);
    if (ready > 0) {
      const ssize_t n = read(fd_, buffer, sizeof(buffer));
      if (n == 0) break;  // every writer closed the pipe
      if (n > 0) {
        pending.append(buffer, static_cast<size_t>(n));
        size_t newline;
        while ((newline = pending.find('\n')) != std::string::npos) {
          handle_line(std::string_view(pending).substr(0, newline));
          pending.erase(0, newline + 1);
        }
      }
    }
    if (!exited && waitpid(pid_, &status, WNOHANG) == pid_) {
      exited = true;
      exited_at = Clock::now();
    }
    // A rank that outlives mpirun may keep the pipe open; stop listening a moment later.
    if (exited && ready <= 0 && Clock::now() - exited_at > std::chrono::seconds(1)) break;
  }
  if (!pending.empty()) handle_line(pending);
  if (!exited) waitpid(pid_, &status, 0);
  if (failure_ && failure_->rank >= 0 && static_cast<size_t>(failure_->rank) < last_error_.size() &&
      !last_error_[static_cast<size_t>(failure_->rank)].empty()) {
    failure_->reason += ": " + last_error_[static_cast<size_t>(failure_->rank)];
  }
  return status;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "ended";
}

// The places ranks can run in, for elastic launches: slot i is usable when the health check
// exits 0 with ANVIL_SLOT=i, or, without a health check, unless a rank in it failed at start.
class SlotPool {
 public:
  SlotPool(int slots, std::string health_check, int limit_s)
      : slots_(slots), health_check_(std::move(health_check)), limit_s_(limit_s) {}

  // Returns the usable slots, in order.
  std::vector<int> usable() const {
    std::vector<int> out;
    for (int slot = 0; slot < slots_; ++slot) {
      if (health_check_.empty() ? lost_.count(slot) == 0 : passes_check(slot)) out.push_back(slot);
    }
    return out;
  }
  // Marks a slot lost (a rank failed to start in it).
  void lose(int slot) { lost_.insert(slot); }

 private:
  bool passes_check(int slot) const {
    const pid_t pid = fork();
    ANVIL_CHECK(pid >= 0, "[launch] cannot fork the health check: {}", std::strerror(errno));
    if (pid == 0) {
      setpgid(0, 0);  // so that a timeout ends whatever the check started too
      setenv("ANVIL_SLOT", std::to_string(slot).c_str(), 1);
      execl("/bin/sh", "sh", "-c", health_check_.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // A check that hangs (an unreachable node) must not hang the launcher: past the limit
    // the slot counts as lost.
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(limit_s_);
    int status = 0;
    for (;;) {
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (done < 0 && errno != EINTR) return false;
      if (Clock::now() > deadline) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        log_launch(fmt::format("the health check of slot {} did not finish within {} s; the "
                               "slot counts as lost", slot, limit_s_));
        return false;
      }
      usleep(10000);
    }
  }


  int slots_;
  std::string health_check_;
  int limit_s_;
  std::set<int> lost_;
};

}  // namespace

std::vector<std::string> mpirun_command(const LaunchOptions& options, int attempt, bool as_root,
                                        const std::vector<std::string>& args) {
  std::vector<std::string> argv = {options.mpirun, "-np", std::to_string(options.nproc)};
  if (!options.hostfile.empty()) {
    argv.push_back("--hostfile");
    argv.push_back(options.hostfile);
  }
  argv.push_back("--oversubscribe");
  if (as_root) argv.push_back("--allow-run-as-root");
  argv.push_back("--tag-output");
  for (const std::string& variable : options.exported_env) {
    argv.push_back("-x");
    argv.push_back(variable);
  }
  argv.push_back("-x");
  argv.push_back("ANVIL_LAUNCH_ATTEMPT=" + std::to_string(attempt));
  argv.push_back(options.program);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

TaggedLine parse_tagged_line(std::string_view line) {
  static const std::regex tag(R"(^\[(\d+),(\d+)\]<(stdout|stderr)>:)");
  std::cmatch match;
  TaggedLine out;
  if (std::regex_search(line.data(), line.data() + line.size(), match, tag)) {
    out.rank = parse_int(std::string_view(match[2].first, static_cast<size_t>(match[2].length())));
    out.is_stderr = match[3].str() == "stderr";
    out.text = std::string(line.substr(static_cast<size_t>(match.length(0))));
  } else {
    out.text = std::string(line);
  }
  return out;
}

std::optional<RankFailure> parse_mpirun_failure(std::string_view line, int& pending_rank) {
  static const std::regex signaled(
      R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+) \(([^)]*)\))");
  static const std::regex process_name(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\])");
  static const std::regex exit_code(R"(Exit code:\s*(-?\d+))");
  static const std::regex aborted(R"(MPI_ABORT was invoked on rank (\d+))");
  const std::string text(line);
  std::smatch match;
  if (std::regex_search(text, match, signaled)) {
    return RankFailure{parse_int(match[1].str()),
                       fmt::format("killed by signal {} ({})", match[2].str(), match[3].str())};
  }
  if (std::regex_search(text, match, aborted)) {
    return RankFailure{parse_int(match[1].str()), "called MPI_Abort"};
  }
  if (std::regex_search(text, match, process_name)) {
    pending_rank = parse_int(match[1].str());
    return std::nullopt;
  }
  if (pending_rank >= 0 && std::regex_search(text, match, exit_code)) {
    const int rank = pending_rank;
    pending_rank = -1;
    return RankFailure{rank, fmt::format("exited with code {}", match[1].str())};
  }
  return std::nullopt;
}

long progress_step(std::string_view line) {
  static const std::regex step(R"(^step\s+(\d+)/\d+ \|)");
  std::cmatch match;
  if (!std::regex_search(line.data(), line.data() + line.size(), match, step)) return -1;
  return std::stol(match[1].str());
}

long checkpoint_line_step(std::string_view line) {
  static const std::regex saved(R"(^checkpoint \S*step-(\d+) \()");
  std::cmatch match;
  if (!std::regex_search(line.data(), line.data() + line.size(), match, saved)) return -1;
  return std::stol(match[1].str());
}

int elastic_world(int nproc, int min_nproc, int grad_accum, int usable) {
  const long micro_batches = static_cast<long>(nproc) * grad_accum;
  for (int world = std::min(usable, nproc); world >= std::max(min_nproc, 1); --world) {
    if (micro_batches % world == 0) return world;
  }
  return 0;
}

int run_launch(const LaunchOptions& options) {
  ANVIL_CHECK(options.nproc >= 1, "[launch] --nproc must be >= 1, got {}", options.nproc);
  ANVIL_CHECK(options.max_restarts >= 0, "[launch] --max-restarts must be >= 0, got {}",
              options.max_restarts);
  const int min_nproc = options.min_nproc > 0 ? options.min_nproc : options.nproc;
  ANVIL_CHECK(min_nproc <= options.nproc, "[launch] --min-nproc {} exceeds --nproc {}", min_nproc,
              options.nproc);
  const bool elastic = min_nproc < options.nproc;
  ANVIL_CHECK(!elastic || options.grad_accum > 0,
              "[launch] an elastic launch needs the job's training.grad_accum to keep the global "
              "batch when the world changes");
  const bool as_root = geteuid() == 0;
  SignalGuard signals;
  SlotPool slots(options.nproc, options.health_check, options.health_check_timeout_s);
  Clock::time_point failure_time;
  Clock::time_point last_step_time;
  int world = options.nproc;
  std::vector<int> active;  // the slot of each rank of the current world
  long step = 0;            // where the next start resumes
  int restarts = 0;
  bool recovering = false;  // this start follows a failure (not the first start nor a growth)
  for (int attempt = 0;; ++attempt) {
    if (elastic) {
      const std::vector<int> usable = slots.usable();
      const int next = elastic_world(options.nproc, min_nproc, options.grad_accum,
                                     static_cast<int>(usable.size()));
      if (next == 0) {
        log_launch(fmt::format("giving up: {} of {} slots are usable and no world of {} to {} "
                               "ranks keeps the global batch ({} x training.grad_accum {})",
                               usable.size(), options.nproc, min_nproc, options.nproc,
                               options.nproc, options.grad_accum));
        return 1;
      }
      if (next != world) {
        log_launch(fmt::format(
            "world changed {} -> {} at step {}: usable slots {}; training.grad_accum {} -> {} "
            "keeps the global batch",
            world, next, step, fmt::join(usable, ","), options.nproc * options.grad_accum / world,
            options.nproc * options.grad_accum / next));
      }
      world = next;
      active.assign(usable.begin(), usable.begin() + next);
    }
    std::vector<std::string> args = attempt == 0 ? options.first_args : options.restart_args;
    if (options.grad_accum > 0) {
      args.push_back(fmt::format("--training.grad_accum={}",
                                 options.nproc * options.grad_accum / world));
    }
    LaunchOptions start = options;
    start.nproc = world;
    const std::vector<std::string> argv = mpirun_command(start, attempt, as_root, args);
    if (attempt == 0) log_launch(fmt::format("{} ranks: {}", world, fmt::join(argv, " ")));
    JobRun run(argv, recovering, failure_time, last_step_time);
    if (elastic && world < options.nproc) {
      run.grow_when([&] {
        return elastic_world(options.nproc, min_nproc, options.grad_accum,
                             static_cast<int>(slots.usable().size())) > world;
      });
    }
    const int status = run.supervise(options.stop_timeout_s);
    const bool succeeded = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    step = run.committed_step(step);
    if (run.stop_forwarded()) {
      // A run that finished as the signal came in ended just as well.
      const bool clean = run.clean_stop_reported() || succeeded;
      log_launch(clean ? "stopped; every rank wrote its checkpoint"
                       : "stopped before rank 0 reported a checkpoint");
      return clean ? 0 : 1;
    }
    if (run.grow_requested() && succeeded && run.clean_stop_reported()) {
      log_launch(fmt::format("stopped at step {} to grow the world back", step));
      recovering = false;
      continue;
    }
    // Ranks that stopped cleanly on a signal the launcher did not send (a stop request that
    // reached a rank alone) left the run unfinished: that is a failure to recover from, unless
    // the launcher itself has been told to stop meanwhile.
    const bool unrequested_stop = succeeded && run.clean_stop_reported();
    if (succeeded && !unrequested_stop) return 0;
    if (g_stop_signals.load() > 0) {
      log_launch("stopped between attempts; not restarting");
      return unrequested_stop ? 0 : 1;
    }
    failure_time = run.failure() ? run.failure_seen() : Clock::now();
    last_step_time = run.last_step_seen(failure_time);
    if (unrequested_stop) {
      log_launch("the ranks stopped on a signal the launcher did not send, before the run was "
                 "complete");
    } else if (run.failure()) {
      log_launch(fmt::format("rank {} failed: {}", run.failure()->rank, run.failure()->reason));
      const int rank = run.failure()->rank;
      if (elastic && !run.stepped() && rank >= 0 && rank < static_cast<int>(active.size())) {
        slots.lose(active[static_cast<size_t>(rank)]);
      }
    } else {
      log_launch(fmt::format("mpirun {} without naming a failed rank", describe_status(status)));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == kExitDiverged) {
      log_launch(fmt::format("not restarting: training diverged (exit status {}), and resumed "
                             "from the same checkpoint with the same settings it would diverge "
                             "again; change them (optimizer.lr, optimizer.grad_clip, "
                             "training.skip_nonfinite) and launch again",
                             kExitDiverged));
      return kExitDiverged;
    }
    if (restarts >= options.max_restarts) {
      log_launch(fmt::format("giving up: {} restart{} allowed (--max-restarts)",
                             options.max_restarts, options.max_restarts == 1 ? "" : "s"));
      return 1;
    }
    ++restarts;
    recovering = true;
    log_launch(fmt::format("restart {}/{}: resuming from the newest committed checkpoint",
                           restarts, options.max_restarts));
  }
}

}  // namespace anvil
