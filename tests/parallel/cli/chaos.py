#!/usr/bin/env python3
"""Chaos test of the whole training loop under `anvil launch`.

Trains a tiny model on 2 ranks with a checkpoint every 2 steps while faults drawn from a seeded
RNG hit it: SIGKILL, SIGTERM or SIGSTOP to a random rank or to the launcher, at a random time
or while a checkpoint is being written (its staging folder step-N.partial exists). After each
fault the job must recover by itself (the launcher restarts it) or, when the launcher itself
was killed or told to stop, by running the same command again. At the end the run's final weights,
optimizer state, train state and metrics.jsonl must equal an uninterrupted run's byte for byte
(wall-clock and memory fields aside), and no process of the job may be left.

Faults are injected one at a time: the next one waits until the job has finished a step after
the previous one, so each recovery is measured on its own. The seed fixes the fault plan (kind,
target, save or not, delays); where in a step a fault lands still depends on the machine.

Prints the figures: faults, how many landed during a save (the staging folder existed just
before and just after the signal), the longest recovery (signal to the first step finished by
the restarted job) and the steps recomputed (step lines printed beyond one per step). Any
failed check prints one "FAIL: ..." line and exits 1.

usage: chaos.py --anvil BUILD/anvil --work DIR [--seed S] [--faults N] [--save-faults K]
                [--steps T] [--time-limit SECONDS]
"""

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

# 128 x 8 tokens per micro-batch: enough work per step (about 60 steps/s here) that the
# driver's sub-second reaction times do not let hundreds of steps pass between faults.
TINY = ("--threads 1 --data.synthetic=true --model.dim=32 --model.n_layers=2 --model.n_heads=4 "
        "--model.n_kv_heads=2 --model.ffn_dim=88 --model.vocab_size=64 --model.max_seq_len=128 "
        "--training.seq_len=128 --training.batch_size=8 --optimizer.schedule=constant "
        "--optimizer.warmup_steps=0 --optimizer.grad_clip=0.5 --logging.every=1 "
        "--training.grad_accum=2 --parallel.zero_stage=1 --training.eval_steps=2 "
        "--training.eval_every=5 --checkpoint.every=2 --parallel.collective_timeout_s=5").split()

# (signal, target, weight): ranks take most faults, as on a real cluster.
FAULT_KINDS = [
    (signal.SIGKILL, "rank", 5),
    (signal.SIGTERM, "rank", 2),
    (signal.SIGSTOP, "rank", 1),
    (signal.SIGKILL, "launcher", 2),
    (signal.SIGTERM, "launcher", 1),
    (signal.SIGSTOP, "launcher", 1),
]
STEP_LINE = re.compile(r"^step\s+(\d+)/\d+ \|")
VOLATILE_FIELDS = re.compile(
    r',"(mem_bytes|mem_peak_bytes|mem_planned_bytes|tokens_per_s|mfu|host_waits|readback_bytes|elapsed_s)":[-0-9.eE+]+|,"mem_peak":\{[^}]*\}')


class Failure(Exception):
    """A check failed; the message is the FAIL line."""


class LaunchOutput:
    """Reads one launcher's output into a shared, timestamped list of lines."""

    def __init__(self, log):
        self.log = log
        self.lock = threading.Lock()
        self.lines = []  # (time, epoch, text)
        self.epoch = 0  # bumped at each start of a job: a new launcher or a launcher restart

    def new_epoch(self):
        with self.lock:
            self.epoch += 1

    def follow(self, stream):
        """Starts a thread that reads `stream` until EOF."""
        thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        thread.start()
        return thread

    def _read(self, stream):
        for raw in stream:
            text = raw.decode(errors="replace").rstrip("\n")
            now = time.monotonic()
            with self.lock:
                if text.startswith("anvil launch: restart "):
                    self.epoch += 1
                self.lines.append((now, self.epoch, text))
                self.log.write(f"{now:.3f} e{self.epoch} {text}\n")
                self.log.flush()

    def step_lines(self):
        with self.lock:
            return [(t, e, int(m.group(1))) for t, e, text in self.lines
                    if (m := STEP_LINE.match(text))]

    def recovered(self, fault):
        """Returns whether a step finished after `fault` (None: ever) in the job that replaced
        the one it ended, or after it in the same job when it ended none."""
        with self.lock:
            if fault is None:
                return any(STEP_LINE.match(text) for _, _, text in self.lines)
            min_epoch = fault["epoch"] + 1 if fault["ends_job"] else fault["epoch"]
            return any(t > fault["time"] and e >= min_epoch and STEP_LINE.match(text)
                       for t, e, text in reversed(self.lines[-200:]))

    def last_step(self):
        steps = self.step_lines()
        return steps[-1][2] if steps else 0


def process_table():
    """Returns {pid: (ppid, comm)} for every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        table[int(name)] = (ppid, comm)
    return table


def rank_pids(launcher_pid):
    """Returns {rank: pid} of the job the launcher runs now (empty between attempts)."""
    table = process_table()
    mpiruns = [p for p, (pp, comm) in table.items() if pp == launcher_pid and comm == "mpirun"]
    ranks = {}
    for pid, (ppid, _) in table.items():
        if ppid not in mpiruns:  # mpirun's children here are the ranks
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as env:
                variables = env.read().split(b"\0")
        except OSError:
            continue
        for variable in variables:
            if variable.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(variable.split(b"=", 1)[1])] = pid
    return ranks


def job_processes(run_dir):
    """Returns the pids of live processes whose command line names the run directory."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if run_dir.encode() not in cmdline.read():
                    continue
            with open(f"/proc/{name}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


def staging_folder(run_dir):
    """Returns the name of a checkpoint staging folder being written now, or None."""
    try:
        names = os.listdir(os.path.join(run_dir, "checkpoints"))
    except OSError:
        return None
    return next((name for name in names if name.endswith(".partial")), None)


def make_plan(rng, faults, save_faults):
    """Draws every fault up front, so the seed alone fixes the plan. Every kind of fault is
    in it at least once when there are enough faults; the rest are drawn by weight."""
    at_save = set(rng.sample(range(faults), save_faults))
    weighted = [(sig, target) for sig, target, weight in FAULT_KINDS for _ in range(weight)]
    kinds = [(sig, target) for sig, target, _ in FAULT_KINDS][:faults]
    kinds += [rng.choice(weighted) for _ in range(faults - len(kinds))]
    rng.shuffle(kinds)
    plan = []
    for index, (sig, target) in enumerate(kinds):
        plan.append({"signal": sig, "target": target, "rank": rng.randrange(2),
                     "at_save": index in at_save or rng.random() < 0.25,
                     "gap_steps": rng.randrange(4), "jitter": rng.uniform(0, 0.05),
                     "pause": rng.uniform(0.1, 0.4)})
    return plan


class Chaos:
    def __init__(self, args):
        self.args = args
        self.run_dir = os.path.join(args.work, "chaos")
        self.command = [args.anvil, "launch", "--nproc", "2", "--max-restarts", "1000",
                        "--stop-timeout", "60", "--", "train", *TINY,
                        f"--training.steps={args.steps}", "--run-dir", self.run_dir]
        self.log = open(os.path.join(args.work, "chaos.log"), "w")
        self.output = LaunchOutput(self.log)
        self.plan = make_plan(random.Random(args.seed), args.faults, args.save_faults)
        self.done = []  # the faults sent, with when and where they landed
        self.launches = 0
        self.deadline = time.monotonic() + args.time_limit

    def check_deadline(self):
        if time.monotonic() > self.deadline:
            raise Failure(f"the chaos run did not finish within {self.args.time_limit} s "
                          f"(see {self.log.name})")

    def run(self):
        while True:
            self.check_deadline()
            self.launches += 1
            self.output.new_epoch()
            self.log.write(f"{time.monotonic():.3f} chaos: launch {self.launches}\n")
            launcher = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
            reader = self.output.follow(launcher.stdout)
            while launcher.poll() is None:
                self.check_deadline()
                previous = self.done[-1] if self.done else None
                if (len(self.done) < len(self.plan) and self.output.recovered(previous)
                        and self.output.last_step() < self.args.steps - 4):
                    self.inject(self.plan[len(self.done)], launcher)
                else:
                    time.sleep(0.05)
            launcher.wait()
            reader.join(timeout=10)
            self.wait_job_gone()
            if launcher.returncode == 0 and self.complete():
                break
            if self.launches > 3 * len(self.plan) + 5:
                raise Failure(f"{self.launches} launches and the run is not complete "
                              f"(see {self.log.name})")
        if len(self.done) < len(self.plan):
            raise Failure(f"the run finished after {len(self.done)} of {len(self.plan)} "
                          f"faults; give it more steps (--steps)")
        self.finished = time.monotonic()

    def complete(self):
        final = os.path.join(self.run_dir, "checkpoints", f"step-{self.args.steps:07d}")
        return os.path.exists(os.path.join(final, "COMMIT"))

    def wait_job_gone(self):
        """Fails when processes of the job outlive its launcher by more than 20 s."""
        until = time.monotonic() + 20
        while (left := job_processes(self.run_dir)):
            if time.monotonic() > until:
                raise Failure(f"processes {left} of the job outlived its launcher")
            time.sleep(0.1)

    def inject(self, fault, launcher):
        """Sends one fault; returns False when the job ended before it could land."""
        # The pause before a fault is counted in steps, so that the faults fit in the run
        # however fast the machine trains; the jitter spreads them over a step.
        until_step = self.output.last_step() + fault["gap_steps"]
        while self.output.last_step() < until_step:
            if launcher.poll() is not None:
                return False
            time.sleep(0.005)
        time.sleep(fault["jitter"])
        # Find the target first, so that a fault aimed at a save follows the staging folder's
        # appearance by as little as possible.
        if fault["target"] == "launcher":
            pid, who = launcher.pid, "launcher"
        else:
            ranks = rank_pids(launcher.pid)
            if fault["rank"] not in ranks:
                return False  # between attempts: try again at the next poll
            pid, who = ranks[fault["rank"]], f"rank {fault['rank']}"
        if fault["at_save"]:
            # Saves take a fraction of a second; poll often enough to land inside one.
            while staging_folder(self.run_dir) is None:
                if launcher.poll() is not None:
                    return False
                self.check_deadline()
                time.sleep(0.002)
        before = staging_folder(self.run_dir)
        sent = time.monotonic()
        try:
            os.kill(pid, fault["signal"])
        except ProcessLookupError:
            return False
        after = staging_folder(self.run_dir)
        epoch = self.output.epoch
        # A stopped launcher resumes; every other fault ends the job (a stopped rank through
        # its peers' watchdog, a stop request to one rank through the launcher's restart).
        paused = fault["signal"] == signal.SIGSTOP and who == "launcher"
        if paused:
            time.sleep(fault["pause"])
            os.kill(pid, signal.SIGCONT)
        record = {"time": sent, "epoch": epoch, "who": who, "step": self.output.last_step(),
                  "ends_job": not paused,
                  "signal": signal.Signals(fault["signal"]).name,
                  "during_save": before is not None and before == after, "save": before}
        self.done.append(record)
        self.log.write(f"{sent:.3f} chaos: fault {len(self.done)}: {record['signal']} to {who} "
                       f"after step {record['step']}"
                       f"{' during the save of ' + before if record['during_save'] else ''}\n")
        return True

    def recoveries(self):
        """Returns each fault's recovery time: from the signal to the first step finished by
        the job that replaced the one it hit (or, when the job survived, its next step)."""
        steps = self.output.step_lines()
        out = []
        for index, fault in enumerate(self.done):
            until = self.done[index + 1]["time"] if index + 1 < len(self.done) else 1e18
            min_epoch = fault["epoch"] + 1 if fault["ends_job"] else fault["epoch"]
            later = [t for t, e, _ in steps if fault["time"] < t < until and e >= min_epoch]
            first = later[0] if later else self.finished
            out.append(first - fault["time"])
        return out


def deterministic_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as metrics:
        return [VOLATILE_FIELDS.sub("", line) for line in metrics]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def compare_runs(straight, chaos, steps):
    """Fails unless the chaos run ends exactly where the uninterrupted one does."""
    if deterministic_metrics(straight) != deterministic_metrics(chaos):
        expected, got = deterministic_metrics(straight), deterministic_metrics(chaos)
        first = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b),
                     min(len(expected), len(got)))
        raise Failure(f"metrics.jsonl differs from the uninterrupted run's at line {first + 1} "
                      f"({len(got)} lines vs {len(expected)})")
    final = f"checkpoints/step-{steps:07d}"
    names = sorted(name for name in os.listdir(os.path.join(straight, final))
                   if name.endswith(".safetensors"))
    if not any(name.startswith("optimizer") for name in names):
        raise Failure(f"the uninterrupted run's {final} has no optimizer file")
    for name in names:
        if read_bytes(os.path.join(straight, final, name)) != \
                read_bytes(os.path.join(chaos, final, name)):
            raise Failure(f"{final}/{name} differs from the uninterrupted run's")
    state = [re.sub(r'"train_seconds": [-0-9.eE+]+', "", read_bytes(
        os.path.join(run, final, "train_state.json")).decode()) for run in (straight, chaos)]
    if state[0] != state[1]:
        raise Failure(f"{final}/train_state.json differs from the uninterrupted run's")
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--anvil", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=8)
    parser.add_argument("--save-faults", type=int, default=3,
                        help="faults that wait for a checkpoint save to start")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--time-limit", type=float, default=200)
    args = parser.parse_args()
    args.anvil = os.path.abspath(args.anvil)
    args.work = os.path.abspath(args.work)
    if args.save_faults > args.faults:
        parser.error("--save-faults cannot exceed --faults")
    subprocess.run(["rm", "-rf", args.work], check=True)
    os.makedirs(args.work)
    straight = os.path.join(args.work, "straight")
    with open(os.path.join(args.work, "straight.log"), "w") as log:
        reference = [args.anvil, "launch", "--nproc", "2", "--", "train", *TINY,
                     f"--training.steps={args.steps}", "--run-dir", straight]
        if subprocess.run(reference, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
            print(f"FAIL: the uninterrupted run failed (see {log.name})")
            return 1
    chaos = Chaos(args)
    try:
        chaos.run()
        names = compare_runs(straight, chaos.run_dir, args.steps)
    except Failure as failure:
        print(f"FAIL: {failure}")
        for pid in job_processes(chaos.run_dir):
            os.kill(pid, signal.SIGKILL)
        return 1
    for index, fault in enumerate(chaos.done):
        where = f" during the save of {fault['save']}" if fault["during_save"] else ""
        print(f"fault {index + 1}: {fault['signal']} to {fault['who']} after step "
              f"{fault['step']}{where}")
    steps = chaos.output.step_lines()
    recomputed = len(steps) - len({step for _, _, step in steps})
    during_save = sum(fault["during_save"] for fault in chaos.done)
    recoveries = chaos.recoveries()
    print(f"chaos: {len(chaos.done)} faults, {during_save} during a save, longest recovery "
          f"{max(recoveries):.1f} s, {recomputed} steps recomputed, {chaos.launches} launches "
          f"of the same command; final weights ({', '.join(names)}), train state and "
          f"metrics equal the uninterrupted run's")
    if during_save < args.save_faults:
        print(f"FAIL: only {during_save} faults landed during a save (wanted {args.save_faults})")
        return 1
    print(f"PASS: {args.steps} steps under {len(chaos.done)} faults equal an uninterrupted run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
