#!/usr/bin/env python3
"""CPU training throughput of anvil against PyTorch on the same Llama configuration.

One invocation measures, for every (configuration, dtype), `anvil train --data.synthetic=true`
and bench/torch_llama.py alternately (anvil, torch, anvil, torch, ... for --reps repetitions,
so slow drifts of a shared machine hit both sides alike) at the same thread count, and keeps
the best repetition of each side. Both report steady-state tokens/s (the first two steps
excluded) and peak RSS; achieved GFLOP/s uses one formula for both (LlamaConfig::
flops_per_token: 6 * matmul parameters + 12 * layers * seq * q_dim per token). MFU is taken
against a GEMM ceiling measured in the same run at the same thread count: PyTorch's large
square f32 and bf16 matmul and, with --kernel-bench, anvil's own (bench/kernels); the higher
of the two for the run's dtype is used, and both are printed.

Usage:
  bench/cpu_compare.py --anvil build/anvil --python /path/to/venv/bin/python [--threads 2]
  bench/cpu_compare.py --anvil build/anvil --quick        # a small model, one repetition
  (add --kernel-bench build/bench/kernels/kernel_bench for anvil's own GEMM ceiling)
Prints a Markdown report (machine, versions, ceilings, table); --json FILE keeps raw results.
Not a test: nothing in CI runs it.
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The benchmark models: ~32M parameters (untied head) at two context lengths, same tokens/step.
MODEL_32M = dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1408, vocab_size=8192)
CONFIGS = {
    "32M seq256 b8": dict(MODEL_32M, seq_len=256, batch_size=8),
    "32M seq1024 b2": dict(MODEL_32M, seq_len=1024, batch_size=2),
}
QUICK_CONFIGS = {
    "4M seq128 b4": dict(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=704,
                         vocab_size=4096, seq_len=128, batch_size=4),
}
# Steps each side leaves out of its steady-state tokens/s (anvil's trainer and torch_llama.py).
WARMUP_STEPS_EXCLUDED = 2
# Optimizer settings passed explicitly to both sides so neither depends on the other's defaults.
OPTIMIZER = dict(lr=2e-3, min_lr=2e-4, schedule="cosine", warmup_steps=2, weight_decay=0.1,
                 beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.0)

CEILING_SNIPPET = r"""
import json, resource, sys, time, torch
threads, n = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
baseline_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
out = {"torch_version": torch.__version__, "baseline_rss_mb": baseline_rss_mb,
       "threads": torch.get_num_threads(), "n": n}
for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    c = a @ b
    best = float("inf")
    for _ in range(5):
        begin = time.perf_counter()
        torch.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - begin)
    out[name + "_gflops"] = 2.0 * n ** 3 / best / 1e9
print(json.dumps(out))
"""


def anvil_kernel_ceilings(kernel_bench, threads, n, timeout):
    """Returns {"f32": GFLOP/s, "bf16": GFLOP/s} from bench/kernels' gemm section, or None."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        proc = subprocess.run([kernel_bench, "--sections", "gemm", "--gemm-size", str(n)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"# kernel_bench failed: {e}", file=sys.stderr)
        return None
    match = re.search(r"ceiling \S+: f32 ([\d.]+) GFLOP/s, bf16[^,]*?\s([\d.]+) GFLOP/s",
                      proc.stdout)
    if proc.returncode != 0 or not match:
        print(f"# kernel_bench gave no ceiling line (exit {proc.returncode})", file=sys.stderr)
        return None
    return {"f32": float(match.group(1)), "bf16": float(match.group(2))}


def anvil_command(anvil, run_dir, threads, cfg, dtype, steps):
    overrides = {
        "data.synthetic": "true", "logging.json": "true", "training.eval_steps": 0,
        "checkpoint.every": 0, "model.dim": cfg["dim"], "model.n_layers": cfg["n_layers"],
        "model.n_heads": cfg["n_heads"], "model.n_kv_heads": cfg["n_kv_heads"],
        "model.ffn_dim": cfg["ffn_dim"], "model.vocab_size": cfg["vocab_size"],
        "model.max_seq_len": cfg["seq_len"], "model.tie_embeddings": "false",
        "training.steps": steps, "training.batch_size": cfg["batch_size"],
        "training.seq_len": cfg["seq_len"], "training.grad_accum": 1, "training.dtype": dtype,
    }
    overrides.update({f"optimizer.{k}": v for k, v in OPTIMIZER.items()})
    return [anvil, "train", "--run-dir", run_dir, "--resume", "never", "--threads", str(threads),
            *[f"--{k}={v}" for k, v in overrides.items()]]


def torch_command(python, threads, cfg, dtype, steps):
    flags = {"dim": cfg["dim"], "n-layers": cfg["n_layers"], "n-heads": cfg["n_heads"],
             "n-kv-heads": cfg["n_kv_heads"], "ffn-dim": cfg["ffn_dim"],
             "vocab-size": cfg["vocab_size"], "seq-len": cfg["seq_len"],
             "batch-size": cfg["batch_size"], "steps": steps, "dtype": dtype,
             "threads": threads}
    flags.update({k.replace("_", "-"): v for k, v in OPTIMIZER.items()})
    cmd = [python, os.path.join(HERE, "torch_llama.py")]
    for k, v in flags.items():
        cmd += [f"--{k}", str(v)]
    return cmd


def run_json(cmd, timeout, env=None):
    """Runs cmd; returns (summary dict from its last stdout line, None) or (None, error)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        message = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["?"])
        return None, f"exit {proc.returncode}: {message[-1][:200]}"
    try:
        summary = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None, f"last stdout line is not JSON: {lines[-1][:200]}"
    summary["stdout"] = proc.stdout
    summary["stderr"] = proc.stderr
    summary["process_cpu_seconds"] = cpu_seconds  # whole process, start-up included
    return summary, None


def anvil_backend_name(stdout):
    for line in stdout.splitlines():
        if "| backend " in line:
            return line.split("| backend ", 1)[1].split("|", 1)[0].strip()
    return "?"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def anvil_commit_state(anvil):
    # The checkout the binary was built in (a before/after comparison runs two of them).
    checkout = os.path.dirname(os.path.realpath(anvil))

    def git(*args):
        proc = subprocess.run(["git", "-C", checkout, *args], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ":/src")
    untracked = git("status", "--porcelain", "--", ":/src")
    state = head
    if dirty or untracked:
        state += " + uncommitted changes in src/"
    return state


def fmt_num(value, pattern):
    return "n/a" if value is None else pattern.format(value)


def ratio(a, b):
    return a / b if a is not None and b else None


def update_ceilings(args, ceilings):
    """Measures the GEMM ceilings once more and keeps, per key, the best value seen so far.

    Called before the first and after every configuration, so a ceiling taken while the
    machine happened to be busy does not inflate the MFU of runs measured when it was quiet.
    """
    n = 1024 if args.quick else 2048
    measured, error = run_json([args.python, "-c", CEILING_SNIPPET, str(args.threads), str(n)],
                               args.timeout)
    if error:
        sys.exit(f"cpu_compare: the GEMM ceiling measurement with {args.python} failed: {error}")
    measured.pop("stdout", None)
    measured.pop("process_cpu_seconds", None)
    if args.kernel_bench:
        kernel = anvil_kernel_ceilings(args.kernel_bench, args.threads, n, args.timeout)
        for dtype, value in (kernel or {}).items():
            measured[f"anvil_{dtype}_gflops"] = value
    for key, value in measured.items():
        if key.endswith("_gflops"):
            ceilings.setdefault(key + "_all", []).append(value)
            value = max(value, ceilings.get(key, 0.0))
        elif key == "baseline_rss_mb":
            value = min(value, ceilings.get(key, value))
        ceilings[key] = value
    print("# GEMM ceilings (GFLOP/s): " + ", ".join(
        f"{k[:-7]} {v:.1f}" for k, v in measured.items() if k.endswith("_gflops")),
        file=sys.stderr, flush=True)


def short_run_cpu_seconds(args, side, work, cfg, dtype):
    """Returns (process CPU seconds of the same run with only the excluded warm-up steps,
    error). Subtracting it from the full run's leaves the steady-state steps' CPU time."""
    steps = WARMUP_STEPS_EXCLUDED
    run_dir = os.path.join(work, "short-run")
    cmd = (anvil_command(args.anvil, run_dir, args.threads, cfg, dtype, steps) if side == "anvil"
           else torch_command(args.python, args.threads, cfg, dtype, steps))
    summary, error = run_json(cmd, args.timeout)
    shutil.rmtree(run_dir, ignore_errors=True)
    return (None, error) if error else (summary["process_cpu_seconds"], None)


def measure(args, configs, ceilings):
    """Returns [(name, cfg, dtype, runs, errors)], alternating anvil and torch runs."""
    measured = []
    work = tempfile.mkdtemp(prefix="anvil-cpu-compare-")
    try:
        update_ceilings(args, ceilings)
        for name, cfg in configs.items():
            for dtype in args.dtypes:
                runs = {"anvil": [], "torch": []}
                errors = {"anvil": None, "torch": None}
                for rep in range(args.reps):
                    run_dir = os.path.join(work, f"run-{len(measured)}-{rep}")
                    sides = (("anvil", anvil_command(args.anvil, run_dir, args.threads, cfg, dtype,
                                                     args.steps)),
                             ("torch", torch_command(args.python, args.threads, cfg, dtype,
                                                     args.steps)))
                    for side, cmd in sides:
                        if errors[side]:
                            continue  # a side that failed once will fail again
                        summary, error = run_json(cmd, args.timeout)
                        if not error and args.cpu_time:
                            summary["short_cpu_seconds"], error = short_run_cpu_seconds(
                                args, side, work, cfg, dtype)
                        shutil.rmtree(run_dir, ignore_errors=True)
                        if error:
                            errors[side] = error
                        else:
                            runs[side].append(summary)
                        print(f"# {name} {dtype} rep {rep + 1}/{args.reps} {side}: "
                              + (error or f"{summary['tokens_per_s']:.0f} tok/s"),
                              file=sys.stderr, flush=True)
                measured.append((name, cfg, dtype, runs, errors))
            update_ceilings(args, ceilings)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return measured


def mfu_ceiling(ceilings, dtype):
    """Returns (GFLOP/s, source) of the higher measured GEMM ceiling of `dtype`."""
    candidates = [(ceilings.get(f"{dtype}_gflops"), "torch.matmul"),
                  (ceilings.get(f"anvil_{dtype}_gflops"), "anvil kernel_bench")]
    candidates = [c for c in candidates if c[0]]
    return max(candidates) if candidates else (None, "none")


def steady_tokens_per_cpu_second(run, cfg):
    """Returns tokens per CPU-second of the steps after the warm-up ones, from the CPU time of
    the full run minus that of a run of only the warm-up steps (start-up cancels out)."""
    steady_steps = run["steps"] - WARMUP_STEPS_EXCLUDED
    cpu = run["process_cpu_seconds"] - run["short_cpu_seconds"]
    tokens = steady_steps * cfg["batch_size"] * cfg["seq_len"]
    return tokens / cpu if steady_steps > 0 and cpu > 0 else None


def summarise(name, cfg, dtype, runs, errors, ceilings):
    row = {"config": name, "dtype": dtype, **cfg}
    ceiling = mfu_ceiling(ceilings, dtype)[0]
    for side in ("anvil", "torch"):
        rates = [r["tokens_per_s"] for r in runs[side]]
        best = max(runs[side], key=lambda r: r["tokens_per_s"]) if rates else None
        row[side] = {
            "error": errors[side],
            "tokens_per_s_all": rates,
            "tokens_per_s": best["tokens_per_s"] if best else None,
            "tokens_per_s_median": statistics.median(rates) if rates else None,
            "gflops_per_s": best["tokens_per_s"] * best["flops_per_token"] / 1e9 if best else None,
            "flops_per_token": best["flops_per_token"] if best else None,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[side]) if rates else None,
            "final_loss": best["final_loss"] if best else None,
            "process_cpu_seconds_all": [r["process_cpu_seconds"] for r in runs[side]],
            "tokens_per_cpu_s_all": [steady_tokens_per_cpu_second(r, cfg)
                                     for r in runs[side] if "short_cpu_seconds" in r],
        }
        row[side]["mfu"] = ratio(row[side]["gflops_per_s"], ceiling)
        if side == "anvil" and best:
            row[side]["backend"] = anvil_backend_name(best["stdout"])
        if side == "torch" and best:
            row[side]["attention"] = best.get("attention")
            row[side]["adamw"] = best.get("adamw")
    a_fpt, t_fpt = row["anvil"]["flops_per_token"], row["torch"]["flops_per_token"]
    row["flops_formula_agrees"] = None if a_fpt is None or t_fpt is None else a_fpt == t_fpt
    return row


def pair_ratios(row):
    """Returns anvil/torch tokens/s of each alternating (anvil, torch) repetition pair."""
    return [a / t for a, t in zip(row["anvil"]["tokens_per_s_all"], row["torch"]["tokens_per_s_all"])
            if t]


def median_text(values):
    return f"{statistics.median(values):.0f}" if values else "n/a"


def report(context, results, ceilings):
    c = context
    lines = []
    add = lines.append
    add(f"Measured {c['started']} with `bench/cpu_compare.py{' --quick' if c['quick'] else ''}` "
        f"({c['reps']} alternating repetitions per side, best kept; {c['steps']} steps each, "
        "first 2 excluded).")
    add("")
    add(f"- CPU: {c['cpu']} ({c['cpus']} logical CPUs visible), {c['threads']} threads for both "
        "sides")
    add(f"- load average before/after: {c['load_before']} / {c['load_after']} (other processes "
        "share the machine)")
    add(f"- OPENBLAS_CORETYPE: {c['openblas_coretype']}")
    add(f"- anvil: {c['anvil']} (built {c['anvil_built']} from commit {c['anvil_commit']}), "
        "backend "
        f"{next((r['anvil'].get('backend') for r in results if r['anvil'].get('backend')), '?')}")
    torch_row = next((r["torch"] for r in results if r["torch"].get("attention")), {})
    add(f"- PyTorch {ceilings.get('torch_version', '?')} ({c['python']}); attention "
        f"{torch_row.get('attention', '?')}, AdamW {torch_row.get('adamw', '?')}; bf16 through "
        "torch.autocast on fp32 master weights; import baseline RSS "
        f"{fmt_num(ceilings.get('baseline_rss_mb'), '{:.0f}')} MB")
    add(f"- GEMM ceiling, torch.matmul {ceilings.get('n', '?')}^3 at {c['threads']} threads (best "
        f"of 5 per measurement, best of {len(ceilings.get('f32_gflops_all', []))} measurements "
        f"spread over the run): f32 {fmt_num(ceilings.get('f32_gflops'), '{:.1f}')} GFLOP/s, "
        f"bf16 {fmt_num(ceilings.get('bf16_gflops'), '{:.1f}')} GFLOP/s")
    if "anvil_f32_gflops" in ceilings:
        add(f"- GEMM ceiling, anvil bench/kernels `kernel_bench --sections gemm` "
            f"({c['kernel_bench']}; best of the same measurements): f32 "
            f"{ceilings['anvil_f32_gflops']:.1f} GFLOP/s, bf16 "
            f"{ceilings['anvil_bf16_gflops']:.1f} GFLOP/s")
    else:
        add("- GEMM ceiling through anvil's kernel_bench: not measured (pass --kernel-bench)")
    used = {d: mfu_ceiling(ceilings, d) for d in ("f32", "bf16")}
    add("- MFU = achieved GFLOP/s over the higher measured ceiling of the run's dtype: "
        + ", ".join(f"{d} {fmt_num(v, '{:.1f}')} GFLOP/s ({src})" for d, (v, src) in used.items()))
    add("")
    add("| config | dtype | anvil tok/s | torch tok/s | anvil/torch (best) | anvil/torch per pair: "
        "median (range) | anvil GFLOP/s | torch GFLOP/s | anvil MFU | torch MFU | anvil RSS MB | "
        "torch RSS MB | RSS anvil/torch | process CPU-s per run, anvil / torch (median) |")
    add("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        a, t = r["anvil"], r["torch"]
        pairs = pair_ratios(r)
        pair_text = (f"{statistics.median(pairs):.2f} ({min(pairs):.2f}-{max(pairs):.2f})"
                     if pairs else "n/a")
        add(f"| {r['config']} | {r['dtype']} | {fmt_num(a['tokens_per_s'], '{:.0f}')} | "
            f"{fmt_num(t['tokens_per_s'], '{:.0f}')} | "
            f"{fmt_num(ratio(a['tokens_per_s'], t['tokens_per_s']), '{:.2f}')} | {pair_text} | "
            f"{fmt_num(a['gflops_per_s'], '{:.1f}')} | {fmt_num(t['gflops_per_s'], '{:.1f}')} | "
            f"{fmt_num(a['mfu'], '{:.0%}')} | {fmt_num(t['mfu'], '{:.0%}')} | "
            f"{fmt_num(a['peak_rss_mb'], '{:.0f}')} | {fmt_num(t['peak_rss_mb'], '{:.0f}')} | "
            f"{fmt_num(ratio(a['peak_rss_mb'], t['peak_rss_mb']), '{:.2f}')} | "
            f"{median_text(a['process_cpu_seconds_all'])} / "
            f"{median_text(t['process_cpu_seconds_all'])} |")
    if any(r["anvil"].get("tokens_per_cpu_s_all") or r["torch"].get("tokens_per_cpu_s_all")
           for r in results):
        add("")
        add(f"CPU time ({c['threads']} thread(s)): steady-state tokens per CPU-second of each "
            "process (CPU time of the full run minus that of a run of only the 2 warm-up "
            "steps), best repetition. Unlike wall time this hardly depends on other load, but "
            "with more than one thread it also counts threads spinning at barriers.")
        add("")
        add("| config | dtype | anvil tok/CPU-s | torch tok/CPU-s | anvil/torch |")
        add("|---|---|---:|---:|---:|")
        for r in results:
            best = [max((v for v in r[side].get("tokens_per_cpu_s_all", []) if v), default=None)
                    for side in ("anvil", "torch")]
            add(f"| {r['config']} | {r['dtype']} | {fmt_num(best[0], '{:.0f}')} | "
                f"{fmt_num(best[1], '{:.0f}')} | {fmt_num(ratio(*best), '{:.2f}')} |")
    notes = []
    for r in results:
        for side in ("anvil", "torch"):
            if r[side]["error"]:
                notes.append(f"{r['config']} {r['dtype']} {side}: {r[side]['error']}")
        if r["flops_formula_agrees"] is False:
            notes.append(f"{r['config']}: anvil and torch_llama.py disagree on FLOPs/token "
                         f"({r['anvil']['flops_per_token']} vs {r['torch']['flops_per_token']})")
    if notes:
        add("")
        add("Failures and warnings:")
        for note in notes:
            add(f"- {note}")
    return "\n".join(lines)


def load_average():
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anvil", default=os.path.join(REPO, "build", "anvil"),
                   help="anvil executable (default: build/src/anvil)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch for torch_llama.py (default: this one)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kernel-bench", default="",
                   help="bench/kernels kernel_bench executable: also measure anvil's GEMM ceiling")
    p.add_argument("--reps", type=int, default=None, help="repetitions per side (default 3)")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default 6)")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--configs", default="", help="comma-separated subset of the config names")
    p.add_argument("--quick", action="store_true", help="a small model, 5 steps, 1 repetition")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--cpu-time", action="store_true",
                   help="also measure steady-state tokens per CPU-second (one extra short run "
                        "per run; most meaningful with --threads 1 on a shared machine)")
    p.add_argument("--json", default="", help="also write the raw results here")
    p.add_argument("--report-from", default="",
                   help="print the report of an earlier --json file instead of measuring")
    args = p.parse_args()
    if args.report_from:
        with open(args.report_from) as f:
            saved = json.load(f)
        print(report(saved["context"], saved["results"], saved["ceilings"]))
        return
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    args.reps = args.reps or (1 if args.quick else 3)
    args.steps = args.steps or (5 if args.quick else 6)
    if not os.access(args.anvil, os.X_OK):
        sys.exit(f"cpu_compare: {args.anvil} is not an executable (build target anvil, or pass "
                 "--anvil)")
    configs = QUICK_CONFIGS if args.quick else CONFIGS
    if args.configs:
        wanted = [c.strip() for c in args.configs.split(",")]
        unknown = [c for c in wanted if c not in configs]
        if unknown:
            sys.exit(f"cpu_compare: unknown config {unknown}; choose from {list(configs)}")
        configs = {c: configs[c] for c in wanted}

    now = datetime.datetime.now().astimezone
    context = {
        "started": now().strftime("%Y-%m-%d %H:%M %Z"), "load_before": load_average(),
        "quick": args.quick, "reps": args.reps, "steps": args.steps, "threads": args.threads,
        "cpu": cpu_model(), "cpus": os.cpu_count(),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "not set"),
        "anvil": args.anvil, "anvil_commit": anvil_commit_state(args.anvil),
        "anvil_built": datetime.datetime.fromtimestamp(os.path.getmtime(args.anvil))
        .astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "python": args.python, "kernel_bench": args.kernel_bench,
    }
    begin = time.perf_counter()
    ceilings = {}
    measured = measure(args, configs, ceilings)
    results = [summarise(*m, ceilings) for m in measured]
    context["load_after"] = load_average()
    for r in results:
        for side in ("anvil", "torch"):
            r[side].pop("stdout", None)
    print(report(context, results, ceilings))
    print(f"# total {time.perf_counter() - begin:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"context": context, "ceilings": ceilings, "results": results}, f, indent=1)

if __name__ == "__main__":
    main()
