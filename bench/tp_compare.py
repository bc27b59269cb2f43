#!/usr/bin/env python3
"""Tensor-parallel step time and communication volume of anvil at tp 1, 2 and 4.

One invocation trains the same model and global batch with `anvil train --data.synthetic=true`
at tp 1 (one process, --threads T), tp 2 and tp 4 (mpirun, one thread per rank, so 4 ranks
oversubscribe a 2-core machine: the point is the bytes, not the speed), alternating the runs
for --reps repetitions and keeping each one's best. PyTorch (bench/torch_llama.py, one process,
--threads T) trains the same configuration as the reference for the step time. From each
anvil run's --logging.json summary it takes the steady-state step time and the payload bytes
rank 0 handed to each mesh axis per step (parallel/mesh.h: CountingCommunicator), and compares
the tp axis with the formula for Megatron-style tensor parallelism with a vocabulary-parallel
head (docs/distributed.md section 9):

  per micro-batch, N = batch x seq rows, C = dim, L = layers, 4-byte f32 activations:
  all-reduces of N x C x 4 bytes: 1 (embedding) + 2L (o_proj, down_proj) in forward,
                                  1 (head input gradient) + 2L (q/k/v, gate/up) in backward,
                                  + 2(L - 1) recomputed in backward with checkpointing
  all-gather of the loss statistics: tp x N x 3 x 4 bytes
With sequence parallelism (--parallel.sequence_parallel) the all-reduces become all-gathers
(before q/k/v, gate/up and the head; of the residual gradient before o_proj, down_proj and the
embedding in backward; of the norm output again for the weight gradients) and reduce-scatters
(after o_proj, down_proj and the embedding; of the norm inputs' gradients), each of N x C x 4
bytes of payload: 1 + 4L + 1 in forward and 1 + 6L + 1 in backward (+ 4(L - 1) recomputed with
checkpointing), plus one all-reduce of C x 4 bytes per norm weight (2L + 1).
A ring all-reduce puts 2(tp-1)/tp of its payload on the wire per rank, an all-gather or a
reduce-scatter (tp-1)/tp; the table shows both.

Usage:
  bench/tp_compare.py --anvil build/anvil [--python venv/bin/python] [--mpirun mpirun]
Prints a Markdown report; --json FILE keeps the raw results. Not a test: nothing in CI runs it.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_compare  # noqa: E402  (run_json, anvil_command, torch_command, load_average, ...)

# 8 heads / 4 kv heads / FFN 1408 / vocabulary 8192 divide by 4: every tp up to 4 applies.
MODEL = dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1408, vocab_size=8192,
             seq_len=256, batch_size=4)
QUICK_MODEL = dict(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=704, vocab_size=4096,
                   seq_len=128, batch_size=4)


def tp_formula_bytes(cfg, tp, sp=False, grad_accum=1, checkpointing=False):
    """Payload bytes per step that one rank hands to the tp axis (see the module docstring)."""
    if tp == 1:
        return 0
    rows = cfg["batch_size"] * cfg["seq_len"]
    layers = cfg["n_layers"]
    row_block = rows * cfg["dim"] * 4
    if sp:
        collectives = 4 + 10 * layers + (4 * (layers - 1) if checkpointing else 0)
        norms = (2 * layers + 1) * cfg["dim"] * 4
    else:
        collectives = 2 + 4 * layers + (2 * (layers - 1) if checkpointing else 0)
        norms = 0
    return grad_accum * (collectives * row_block + norms + tp * rows * 3 * 4)


def wire_bytes(cfg, tp, sp, measured):
    """Bytes a ring algorithm puts on the wire per rank for `measured` payload bytes."""
    if tp == 1:
        return 0
    if not sp:
        return measured * 2 * (tp - 1) / tp
    norms = (2 * cfg["n_layers"] + 1) * cfg["dim"] * 4
    return (measured - norms) * (tp - 1) / tp + norms * 2 * (tp - 1) / tp


def data_formula_bytes(cfg, tp, dp):
    """Payload bytes per step of the stage-0 gradient all-reduce over dp replicas: every
    parameter of one tp shard once (alignment padding and the few bytes of the loss exchange
    left out), 4 bytes each. The head is untied (cpu_compare's configurations)."""
    if dp == 1:
        return 0
    c, v, f = cfg["dim"], cfg["vocab_size"], cfg["ffn_dim"]
    head_dim = c // cfg["n_heads"]
    q, kv = cfg["n_heads"] * head_dim, cfg["n_kv_heads"] * head_dim
    layer = (q * c + 2 * kv * c + c * q + 3 * f * c) // tp + 2 * c
    return 4 * (2 * v * c // tp + cfg["n_layers"] * layer + c)


# (label, tp, dp, sequence parallel): the runs, one process per tp x dp rank.
RUNS = [("tp 1", 1, 1, False), ("tp 2", 2, 1, False), ("tp 2 + sp", 2, 1, True),
        ("tp 4", 4, 1, False), ("tp 4 + sp", 4, 1, True), ("dp 2 x tp 2", 2, 2, False)]


def activation_mib(run_dir):
    """Rank 0's activation arena (MiB) from the run's sharding report."""
    try:
        with open(os.path.join(run_dir, "sharding.json")) as f:
            return json.load(f)["memory_per_rank"][0]["activations"] / 2**20
    except (OSError, KeyError, IndexError, json.JSONDecodeError):
        return None


def anvil_tp_command(args, run_dir, cfg, tp, dp, sp):
    ranks = tp * dp
    one = dict(cfg, batch_size=cfg["batch_size"] // dp)  # the same global batch
    cmd = cpu_compare.anvil_command(args.anvil, run_dir, args.threads if ranks == 1 else 1, one,
                                    "f32", args.steps)
    cmd.append(f"--parallel.tp={tp}")
    if sp:
        cmd.append("--parallel.sequence_parallel=true")
    if ranks == 1:
        return cmd
    return [args.mpirun, "-np", str(ranks), "--oversubscribe", "--allow-run-as-root", *cmd]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anvil", default=os.path.join(cpu_compare.REPO, "build", "anvil"))
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch for the PyTorch reference (skipped without torch)")
    p.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    p.add_argument("--threads", type=int, default=2, help="threads of the one-process runs")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="a 4M-parameter model")
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--json", default="")
    args = p.parse_args()
    cfg = QUICK_MODEL if args.quick else MODEL
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    best = {}
    errors = {}
    work = tempfile.mkdtemp(prefix="anvil_tp_bench_")
    load_before = cpu_compare.load_average()
    sides = ["torch"] + [run[0] for run in RUNS]
    for rep in range(args.reps):
        for side in sides:
            if side == "torch":
                cmd = cpu_compare.torch_command(args.python, args.threads, cfg, "f32", args.steps)
            else:
                _, tp, dp, sp = next(r for r in RUNS if r[0] == side)
                run_dir = os.path.join(work, f"{tp}x{dp}{'sp' if sp else ''}_{rep}")
                cmd = anvil_tp_command(args, run_dir, cfg, tp, dp, sp)
            run, error = cpu_compare.run_json(cmd, args.timeout, env)
            if not error and side != "torch":
                run["activation_mib"] = activation_mib(run_dir)
            if error:
                errors[side] = error
                continue
            if side != "torch":
                run["step_s"] = run["step_seconds"]
            else:
                tokens = cfg["batch_size"] * cfg["seq_len"]
                run["step_s"] = tokens / run["tokens_per_s"] if run.get("tokens_per_s") else None
            if side not in best or (run["step_s"] or 1e9) < (best[side]["step_s"] or 1e9):
                best[side] = run
    shutil.rmtree(work, ignore_errors=True)

    lines = [f"# Tensor parallelism: step time and bytes per axis\n",
             f"model {cfg}, f32, global batch {cfg['batch_size']} x {cfg['seq_len']} tokens, "
             f"{args.steps} steps (steady state: steps 3+), best of {args.reps}; "
             f"cpu {cpu_compare.cpu_model()}, {os.cpu_count()} cores, load "
             f"{load_before} -> {cpu_compare.load_average()}\n",
             "| run | ranks | step s | tokens/s | vs PyTorch | activations MiB/rank | "
             "tp bytes/step (measured) | tp formula | tp ring wire bytes/rank | "
             "data bytes/step (measured) | data formula |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    torch_step = best.get("torch", {}).get("step_s")
    if "torch" in best:
        lines.append(f"| PyTorch eager | 1 | {torch_step:.3f} | {best['torch']['tokens_per_s']:.0f}"
                     f" | 1.00 | - | - | - | - | - | - |")
    for label, tp, dp, sp in RUNS:
        if label not in best:
            lines.append(f"| anvil {label} | {tp * dp} | failed: {errors.get(label, '?')} "
                         "|||||||||")
            continue
        run = best[label]
        one = dict(cfg, batch_size=cfg["batch_size"] // dp)
        measured = run["comm_bytes_per_step"]["tp"]
        formula = tp_formula_bytes(one, tp, sp)
        wire = wire_bytes(one, tp, sp, measured)
        activations = run.get("activation_mib")
        activations = f"{activations:.1f}" if activations is not None else "?"
        ratio = f"{torch_step / run['step_s']:.2f}" if torch_step else "-"
        match = "=" if measured == formula else f"!= ({measured - formula:+d})"
        data = run["comm_bytes_per_step"]["data"]
        data_formula = data_formula_bytes(cfg, tp, dp)
        data_ratio = f" ({data / data_formula:.4f}x)" if data_formula else ""
        lines.append(f"| anvil {label} | {tp * dp} | {run['step_s']:.3f} | "
                     f"{run['tokens_per_s']:.0f} | {ratio} | {activations} | {measured} | "
                     f"{formula} {match} | "
                     f"{wire:.0f} | {data} | {data_formula}{data_ratio} |")
    for side, error in errors.items():
        what = "one repetition of" if side in best else "every repetition of"
        lines.append(f"\n({what} {side} failed: {error})")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": cfg, "best": {str(k): {kk: vv for kk, vv in v.items()
                                                         if kk not in ("stdout", "stderr")}
                                               for k, v in best.items()},
                       "errors": {str(k): v for k, v in errors.items()}}, f, indent=2)


if __name__ == "__main__":
    main()
