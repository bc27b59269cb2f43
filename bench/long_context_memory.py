#!/usr/bin/env python3
"""Peak memory of one-process long-context training in anvil, from 4K to 64K tokens.

One invocation runs `anvil train` once per sequence length (batch 1, activation checkpointing
on, f32 by default, a dim-256 4-layer model with 8 query / 4 kv heads and a 4096-token
vocabulary) for a few steps (at least 2, so AdamW's moments exist and a whole step, forward,
recomputation, backward and update, has run at the largest size) and records:

  - peak RSS: ru_maxrss of that anvil process, read with os.wait4 (the child's own rusage, not
    the running maximum over all children), next to anvil's own `peak_rss_mb` from the
    --logging.json summary (the same getrusage counter, read from inside);
  - the activation arena and workspace bytes from the run's sharding.json (the memory report
    of docs/distributed.md section 4): what the model carved for (1, seq_len) rows;
  - the step time: the wall time of the last step, from metrics.jsonl's elapsed_s.

The Markdown table gives peak RSS per token, its ratio to the first row next to the ratio of
the token counts, and the marginal bytes per token between neighbouring rows: memory that grows
linearly shows a constant marginal cost and an RSS ratio at or below the token ratio, memory
with a (T, T) term shows a marginal cost that doubles with every doubling of T.

Dense causal attention costs about 2 T^2 dim FLOPs per layer forward (and twice again for the
backward, plus the recomputation), so the 64K row takes minutes per step on a small CPU. Per
row overrides keep that affordable when needed, and the table prints them: --layers-for
65536=2 trains fewer layers at 64K only; --set-for 65536:attention.mask=lines passes any
config key for one length (a sparse mask when the build has the [attention] section; the
flash kernel's memory does not depend on the mask).

Usage:
  bench/long_context_memory.py --anvil build/anvil [--threads 2] [--seq-lens 4096,...,65536]
      [--steps 2] [--data synthetic|DIR] [--set key=value] [--layers-for T=L]
      [--set-for T:key=value] [--json F]
Prints the Markdown table; --json FILE keeps the raw results. Not a test: nothing in CI runs it.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cpu_compare import cpu_model  # noqa: E402  (shared helper)
REPO = os.path.dirname(HERE)

MODEL = dict(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=704, vocab_size=4096)
SEQ_LENS = [4096, 8192, 16384, 32768, 65536]
MIB = 1024.0 * 1024.0


def anvil_command(args, run_dir, seq_len, layers, extra):
    overrides = {
        "logging.json": "true", "logging.every": 1, "training.eval_steps": 0,
        "checkpoint.every": 0, "model.dim": MODEL["dim"], "model.n_layers": layers,
        "model.n_heads": MODEL["n_heads"], "model.n_kv_heads": MODEL["n_kv_heads"],
        "model.ffn_dim": MODEL["ffn_dim"], "model.vocab_size": MODEL["vocab_size"],
        "model.max_seq_len": seq_len, "training.seq_len": seq_len, "training.batch_size": 1,
        "training.grad_accum": 1, "training.steps": args.steps, "training.dtype": args.dtype,
        "training.activation_checkpointing": "false" if args.no_checkpointing else "true",
        "optimizer.warmup_steps": 1,
    }
    if args.data == "synthetic":
        overrides["data.synthetic"] = "true"
    else:
        overrides["data.path"] = args.data
    overrides.update(extra)
    return [args.anvil, "train", "--run-dir", run_dir, "--resume", "never", "--threads",
            str(args.threads), *[f"--{k}={v}" for k, v in overrides.items()]]


def run_child(cmd, timeout, cwd):
    """Runs cmd; returns (stdout, stderr, exit status, ru_maxrss in KiB, wall seconds)."""
    begin = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=cwd)
        deadline = time.monotonic() + timeout
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                status = -1
                break
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status) if status != -1 else -1
        out.seek(0)
        err.seek(0)
        return out.read(), err.read(), proc.returncode, usage.ru_maxrss, \
            time.perf_counter() - begin


def read_metrics(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def measure_one(args, seq_len, layers, common, extra, work):
    run_dir = os.path.join(work, f"seq{seq_len}")
    cmd = anvil_command(args, run_dir, seq_len, layers, {**common, **extra})
    print(f"[long_context_memory] seq_len {seq_len}: {' '.join(cmd)}", file=sys.stderr,
          flush=True)
    stdout, stderr, code, maxrss_kib, wall = run_child(cmd, args.timeout, work)
    row = dict(seq_len=seq_len, layers=layers, extra=extra, exit=code, wall_s=wall,
               child_maxrss_mib=maxrss_kib / 1024.0, command=cmd)
    lines = stdout.strip().splitlines()
    if code != 0 or not lines:
        row["error"] = (stderr.strip().splitlines() or lines or ["?"])[-1][:300]
        return row
    try:
        row["summary"] = json.loads(lines[-1])
    except json.JSONDecodeError:
        row["error"] = f"last stdout line is not JSON: {lines[-1][:200]}"
        return row
    sharding = os.path.join(run_dir, "sharding.json")
    if os.path.exists(sharding):
        with open(sharding) as f:
            memory = json.load(f)["memory_per_rank"][0]
        row["memory_report"] = memory
    steps = [m for m in read_metrics(run_dir) if m.get("type") == "train"]
    if len(steps) >= 2:
        row["step_s"] = steps[-1]["elapsed_s"] - steps[-2]["elapsed_s"]
    elif steps:
        row["step_s"] = steps[-1]["elapsed_s"]
    row["losses"] = [m["loss"] for m in steps]
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return row


def fmt_mib(value):
    return "-" if value is None else f"{value:,.0f}"


def report(context, rows):
    out = ["## Long-context training memory (one process)", ""]
    out.append(f"- machine: {context['cpu']}, {context['cpus']} CPUs, {context['mem_gib']} GiB; "
               f"threads {context['threads']}; load before/after "
               f"{context['load_before']} / {context['load_after']}")
    out.append(f"- anvil: {context['anvil']} ({context['anvil_commit']})")
    out.append(f"- model: dim {MODEL['dim']}, {MODEL['n_heads']}/{MODEL['n_kv_heads']} heads, "
               f"ffn {MODEL['ffn_dim']}, vocab {MODEL['vocab_size']}; batch 1, "
               f"{context['dtype']}, activation checkpointing "
               f"{'off' if context['no_checkpointing'] else 'on'}, {context['steps']} steps, "
               f"data {context['data']}" + "".join(
                   f", {k}={v}" for k, v in context.get("set", {}).items()))
    out.append("- peak RSS: the anvil process's ru_maxrss (os.wait4); arena: activations + "
               "workspace of sharding.json; step: wall time of the last step")
    out.append("")
    out.append("| seq_len | layers | overrides | peak RSS MiB | RSS bytes/token | RSS ratio | "
               "token ratio | marginal bytes/token | arena MiB | arena bytes/token | step s |")
    out.append("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    first, previous = None, None
    for r in rows:
        extra = ", ".join(f"{k}={v}" for k, v in r["extra"].items()) or "-"
        if "error" in r:
            out.append(f"| {r['seq_len']} | {r['layers']} | {extra} | failed: {r['error']} "
                       "| | | | | | | |")
            continue
        rss = r["child_maxrss_mib"] * MIB
        mem = r.get("memory_report", {})
        arena = mem.get("activations", 0) + mem.get("workspace", 0) if mem else None
        if first is None:
            first = r
        ratio = rss / (first["child_maxrss_mib"] * MIB)
        token_ratio = r["seq_len"] / first["seq_len"]
        marginal = "-"
        # Only rows of the same depth are comparable: a --layers-for row has fewer layers.
        if previous is not None and previous["layers"] == r["layers"]:
            grown = rss - previous["child_maxrss_mib"] * MIB
            marginal = f"{grown / (r['seq_len'] - previous['seq_len']):,.0f}"
        out.append(
            f"| {r['seq_len']} | {r['layers']} | {extra} | {fmt_mib(r['child_maxrss_mib'])} | "
            f"{rss / r['seq_len']:,.0f} | {ratio:.2f} | {token_ratio:.0f} | {marginal} | "
            f"{fmt_mib(arena / MIB if arena is not None else None)} | "
            f"{(arena / r['seq_len']) if arena is not None else 0:,.0f} | "
            f"{r.get('step_s', float('nan')):.1f} |")
        previous = r
    out.append("")
    out.append("anvil's own peak_rss_mb (summary): " + ", ".join(
        f"{r['seq_len']}: {r['summary']['peak_rss_mb']:.0f}" for r in rows if "summary" in r))
    return "\n".join(out)


def mem_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.0f}"
    except OSError:
        pass
    return "?"


def anvil_commit_state():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + (" + uncommitted changes" if dirty else "")
    except OSError:
        return "?"


def load_average():
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def parse_per_length(values, what):
    """Parses T=L (--layers-for) or T:key=value (--set-for) into {T: ...}."""
    result = {}
    for value in values:
        if what == "layers":
            t, _, layers = value.partition("=")
            result[int(t)] = int(layers)
        else:
            t, _, setting = value.partition(":")
            key, _, v = setting.partition("=")
            if not key or not v:
                sys.exit(f"long_context_memory: --set-for wants T:section.key=value, got {value}")
            result.setdefault(int(t), {})[key] = v
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anvil", default=os.path.join(REPO, "build", "anvil"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seq-lens", default=",".join(str(t) for t in SEQ_LENS))
    p.add_argument("--steps", type=int, default=2, help="steps per run (at least 2)")
    p.add_argument("--dtype", default="f32")
    p.add_argument("--data", default="synthetic",
                   help="'synthetic' (random tokens) or a prepared data folder (absolute path)")
    p.add_argument("--layers-for", action="append", default=[], metavar="T=L",
                   help="train L layers instead of 4 at sequence length T")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="one more config override for every row (e.g. training.doc_mask=true)")
    p.add_argument("--set-for", action="append", default=[], metavar="T:KEY=VALUE",
                   help="one more config override at sequence length T")
    p.add_argument("--no-checkpointing", action="store_true",
                   help="activation checkpointing off (to see what it saves)")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    p.add_argument("--json", default="", help="also write the raw results here")
    p.add_argument("--report-from", default="", help="print the report of an earlier --json")
    args = p.parse_args()
    if args.report_from:
        with open(args.report_from) as f:
            saved = json.load(f)
        print(report(saved["context"], saved["rows"]))
        return
    if args.steps < 2:
        sys.exit("long_context_memory: --steps must be at least 2 (the optimizer state is "
                 "allocated by the first step)")
    if not os.access(args.anvil, os.X_OK):
        sys.exit(f"long_context_memory: {args.anvil} is not an executable (build target anvil, "
                 "or pass --anvil)")
    args.anvil = os.path.abspath(args.anvil)
    layers_for = parse_per_length(args.layers_for, "layers")
    set_for = parse_per_length(args.set_for, "set")
    common = parse_per_length([f"0:{kv}" for kv in args.set], "set").get(0, {})
    context = {
        "started": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "load_before": load_average(), "cpu": cpu_model(), "cpus": os.cpu_count(),
        "mem_gib": mem_gib(), "threads": args.threads, "anvil": args.anvil,
        "anvil_commit": anvil_commit_state(), "dtype": args.dtype, "steps": args.steps,
        "data": args.data, "no_checkpointing": args.no_checkpointing, "set": common,
    }
    rows = []
    work = tempfile.mkdtemp(prefix="anvil-longmem-")
    try:
        for seq_len in [int(t) for t in args.seq_lens.split(",") if t]:
            layers = layers_for.get(seq_len, MODEL["n_layers"])
            row = measure_one(args, seq_len, layers, common, set_for.get(seq_len, {}), work)
            rows.append(row)
            status = row.get("error") or (f"peak RSS {row['child_maxrss_mib']:.0f} MiB, "
                                          f"step {row.get('step_s', float('nan')):.1f} s")
            print(f"[long_context_memory] seq_len {seq_len}: {status}", file=sys.stderr,
                  flush=True)
            if args.json:  # after every row, so a long run that is stopped keeps its rows
                with open(args.json, "w") as f:
                    json.dump({"context": context, "rows": rows}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    context["load_after"] = load_average()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"context": context, "rows": rows}, f, indent=1)
    print(report(context, rows))


if __name__ == "__main__":
    main()
