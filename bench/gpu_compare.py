#!/usr/bin/env python3
"""GPU training throughput of anvil against Hugging Face transformers on one GPU.

One invocation measures, for each configuration (the 1.5B Llama of issue 9 and a small one):
  - anvil: `anvil train --backend cuda --training.dtype=bf16 --data.synthetic=true`
    (bf16 compute, fp32 master weights, its fused AdamW), JSON summary from the last stdout line;
  - anvil-offload: the same with --parallel.offload=true (masters and moments in host memory);
  - torch eager and torch.compile: transformers LlamaForCausalLM with SDPA attention, fp32
    weights under torch.autocast(bf16), torch.optim.AdamW(fused=True), random tokens;
each in its own process, so peak memory is per run. Throughput is steady-state tokens/s (the
first --warmup steps excluded); achieved FLOP/s uses one formula for every side (anvil's
LlamaConfig::flops_per_token: 6 * matmul parameters + 12 * layers * seq * q_dim per token);
MFU is given against 989 TFLOP/s (H100/H200 dense bf16) and against a bf16 GEMM ceiling
measured in the same run (torch.matmul, 8192^3). Peak memory: torch.cuda.max_memory_allocated
for torch, and the backend's counted peak (peak_device_mb) from anvil's JSON summary.

Usage:
  bench/gpu_compare.py --anvil build/anvil [--quick] [--time-budget 420] [--markdown F] [--json F]
  bench/gpu_compare.py --anvil build/anvil --dry-run     # checks arguments, prints the plan
Run by tools/gpu_check.sh on the GPU machine. Not a test: nothing in CI runs it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PEAK_BF16_TFLOPS = 989.0
CONFIGS = {
    "1.5B seq2048 b4": dict(dim=2048, n_layers=16, n_heads=16, n_kv_heads=8, ffn_dim=8192,
                            vocab_size=128256, seq_len=2048, batch_size=4, steps=12),
    "small seq1024 b8": dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1408,
                             vocab_size=32000, seq_len=1024, batch_size=8, steps=20),
}
QUICK = ("small seq1024 b8",)
IMPLS = ("anvil", "anvil-offload", "torch-eager", "torch-compile")
OPTIMIZER = dict(lr=3e-4, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8)
# Field of anvil's JSON summary holding the most memory rank 0's backend held at once, in MiB
# (its allocations as counted by category: requested bytes, like max_memory_allocated).
ANVIL_PEAK_KEY = "peak_device_mb"


def flops_per_token(cfg):
    """6 * matmul parameters + 12 * layers * seq * q_dim (attention), as anvil counts."""
    head_dim = cfg["dim"] // cfg["n_heads"]
    q_dim, kv_dim = cfg["n_heads"] * head_dim, cfg["n_kv_heads"] * head_dim
    per_layer = cfg["dim"] * (2 * q_dim + 2 * kv_dim) + 3 * cfg["dim"] * cfg["ffn_dim"]
    matmul_params = cfg["n_layers"] * per_layer + cfg["dim"] * cfg["vocab_size"]
    return 6 * matmul_params + 12 * cfg["n_layers"] * cfg["seq_len"] * q_dim


def anvil_command(anvil, run_dir, cfg, warmup, offload=False, profile=False):
    overrides = {
        "parallel.offload": "true" if offload else "false",
        "data.synthetic": "true", "logging.json": "true", "training.eval_steps": 0,
        "checkpoint.every": 0, "model.dim": cfg["dim"], "model.n_layers": cfg["n_layers"],
        "model.n_heads": cfg["n_heads"], "model.n_kv_heads": cfg["n_kv_heads"],
        "model.ffn_dim": cfg["ffn_dim"], "model.vocab_size": cfg["vocab_size"],
        "model.max_seq_len": cfg["seq_len"], "model.tie_embeddings": "false",
        "training.steps": cfg["steps"] + warmup, "training.batch_size": cfg["batch_size"],
        "training.seq_len": cfg["seq_len"], "training.grad_accum": 1, "training.dtype": "bf16",
        "optimizer.lr": OPTIMIZER["lr"], "optimizer.weight_decay": OPTIMIZER["weight_decay"],
        "optimizer.beta1": OPTIMIZER["beta1"], "optimizer.beta2": OPTIMIZER["beta2"],
        "optimizer.eps": OPTIMIZER["eps"], "optimizer.warmup_steps": 0,
    }
    if profile:  # one steady-state step traced (trace.json in the run directory)
        overrides["profile.steps"] = f"{warmup + 1}:{warmup + 1}"
    return [anvil, "train", "--backend", "cuda", "--run-dir", run_dir, "--resume", "never",
            *[f"--{k}={v}" for k, v in overrides.items()]]


def trace_top_spans(run_dir, count=12):
    """Returns the `count` span names with the most total time in the run's trace.json, as
    (name, milliseconds, calls); spans of device work time when the host waits for it."""
    path = os.path.join(run_dir, "trace.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    totals = {}
    for event in events:
        if event.get("ph") == "X" and "dur" in event:
            ms, calls = totals.get(event["name"], (0.0, 0))
            totals[event["name"]] = (ms + event["dur"] / 1000.0, calls + 1)
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:count]
    return [(name, round(ms, 2), calls) for name, (ms, calls) in ranked]


def torch_command(cfg, compiled, warmup):
    return [sys.executable, os.path.abspath(__file__), "--torch-worker",
            json.dumps(dict(cfg, compiled=compiled, warmup=warmup))]


# ----------------------------------------------------------------------------- torch side

def torch_worker(spec):
    """Trains HF LlamaForCausalLM for spec's steps; prints one JSON line."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    device = torch.device("cuda")
    config = LlamaConfig(
        hidden_size=spec["dim"], num_hidden_layers=spec["n_layers"],
        num_attention_heads=spec["n_heads"], num_key_value_heads=spec["n_kv_heads"],
        intermediate_size=spec["ffn_dim"], vocab_size=spec["vocab_size"],
        max_position_embeddings=spec["seq_len"], tie_word_embeddings=False,
        attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(device=device, dtype=torch.float32)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": OPTIMIZER["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=OPTIMIZER["lr"], betas=(OPTIMIZER["beta1"], OPTIMIZER["beta2"]),
        eps=OPTIMIZER["eps"], fused=True)
    step_model = torch.compile(model) if spec["compiled"] else model
    generator = torch.Generator(device=device).manual_seed(1)
    shape = (spec["batch_size"], spec["seq_len"])

    def step():
        tokens = torch.randint(0, spec["vocab_size"], shape, device=device, generator=generator)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(spec["warmup"]):
        step()
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(spec["steps"]):
        loss = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - begin
    tokens = spec["steps"] * shape[0] * shape[1]
    print(json.dumps({"tokens_per_s": tokens / seconds, "final_loss": float(loss),
                      "peak_bytes": torch.cuda.max_memory_allocated(),
                      "torch": torch.__version__}))


def gemm_ceiling_tflops():
    """Returns the bf16 torch.matmul rate (TFLOP/s) on 8192^3, best of 3 timings of 10."""
    code = ("import time, torch\n"
            "n = 8192\n"
            "a = torch.randn(n, n, device='cuda', dtype=torch.bfloat16)\n"
            "b = torch.randn(n, n, device='cuda', dtype=torch.bfloat16)\n"
            "for _ in range(5): a @ b\n"
            "best = 1e9\n"
            "for _ in range(3):\n"
            "    torch.cuda.synchronize(); t = time.perf_counter()\n"
            "    for _ in range(10): a @ b\n"
            "    torch.cuda.synchronize(); best = min(best, (time.perf_counter() - t) / 10)\n"
            "print(2 * n ** 3 / best / 1e12)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    return float(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None


# ----------------------------------------------------------------------------- driver

def run_json(cmd, timeout):
    """Runs cmd; returns (dict from its last stdout line, None) or (None, error text)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f}s"
    lines = [l for l in proc.stdout.splitlines() if l.strip().startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return None, f"exit {proc.returncode}: " + " | ".join(tail)
    return json.loads(lines[-1]), None


def measure(args, name, cfg, impl, work):
    if impl.startswith("anvil"):
        run_dir = os.path.join(work, name.replace(" ", "_") + "_" + impl)
        result, error = run_json(anvil_command(args.anvil, run_dir, cfg, args.warmup,
                                               offload=impl == "anvil-offload",
                                               profile=args.profile),
                                 args.run_timeout)
        if result:
            peak_mb = result.get(ANVIL_PEAK_KEY, -1)
            result["peak_bytes"] = int(peak_mb * 2**20) if peak_mb >= 0 else None
            if args.profile:
                result["top_spans"] = trace_top_spans(run_dir)
                for span in result["top_spans"]:
                    print(f"  {name} {impl} span {span[0]}: {span[1]} ms over {span[2]} calls",
                          flush=True)
        return result, error
    return run_json(torch_command(cfg, impl == "torch-compile", args.warmup), args.run_timeout)


def markdown(results, ceiling, torch_version):
    lines = ["## Benchmark: anvil vs HF transformers (bf16 autocast, fp32 master weights, fused AdamW)",
             "",
             f"GEMM ceiling (torch.matmul bf16 8192^3): "
             f"{f'{ceiling:.0f} TFLOP/s' if ceiling else 'not measured'}; peak reference "
             f"{PEAK_BF16_TFLOPS:.0f} TFLOP/s; torch {torch_version or '?'}",
             "",
             "| config | impl | tokens/s | TFLOP/s | MFU (989) | MFU (GEMM ceiling) | peak GiB | vs torch.compile |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, row in results.items():
        compiled = row.get("torch-compile", {}).get("tokens_per_s")
        for impl, r in row.items():
            if "error" in r:
                lines.append(f"| {name} | {impl} | {r['error'][:80]} | | | | | |")
                continue
            tflops = r["tokens_per_s"] * r["flops_per_token"] / 1e12
            peak = f"{r['peak_bytes'] / 2**30:.1f}" if r.get("peak_bytes") else "n/a"
            ratio = f"{r['tokens_per_s'] / compiled:.2f}x" if compiled else "n/a"
            mfu_ceiling = f"{100 * tflops / ceiling:.1f}%" if ceiling else "n/a"
            lines.append(f"| {name} | {impl} | {r['tokens_per_s']:.0f} | {tflops:.1f} | "
                         f"{100 * tflops / PEAK_BF16_TFLOPS:.1f}% | {mfu_ceiling} | {peak} | {ratio} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--anvil", default="build/anvil", help="the anvil binary (CUDA build)")
    parser.add_argument("--quick", action="store_true", help="the small config only")
    parser.add_argument("--only", help="the configs whose name contains this text")
    parser.add_argument("--profile", action="store_true",
                        help="trace one steady-state anvil step (its time counts in the "
                             "throughput) and print the spans that took longest")
    parser.add_argument("--impls", default=",".join(IMPLS), help="comma list of " + ", ".join(IMPLS))
    parser.add_argument("--warmup", type=int, default=3, help="steps excluded from throughput")
    parser.add_argument("--time-budget", type=float, default=1e9,
                        help="seconds; runs that would start after it are skipped")
    parser.add_argument("--run-timeout", type=float, default=300, help="seconds per run")
    parser.add_argument("--markdown", help="write the Markdown section here too")
    parser.add_argument("--json", help="write raw results here")
    parser.add_argument("--dry-run", action="store_true", help="check arguments, print the plan")
    parser.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        torch_worker(json.loads(args.torch_worker))
        return 0

    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        parser.error(f"unknown --impls {unknown}; choose from {', '.join(IMPLS)}")
    if args.warmup < 1:
        parser.error("--warmup must be >= 1 (the first step includes compilation and allocation)")
    if any(i.startswith("anvil") for i in impls) and not (os.path.isfile(args.anvil) and os.access(args.anvil, os.X_OK)):
        parser.error(f"--anvil {args.anvil} is not an executable file")
    names = QUICK if args.quick else tuple(CONFIGS)
    if args.only:
        names = tuple(n for n in names if args.only in n)
        if not names:
            parser.error(f"--only {args.only!r} matches no config; the configs: {', '.join(CONFIGS)}")

    if args.dry_run:
        print(f"plan: {len(names)} configs x {len(impls)} implementations, warmup {args.warmup} "
              f"steps, time budget {args.time_budget:.0f}s, {args.run_timeout:.0f}s per run")
        print("gemm ceiling: torch.matmul bf16 8192^3 (best of 3 x 10)")
        with tempfile.TemporaryDirectory() as work:
            for name in names:
                cfg = CONFIGS[name]
                print(f"{name}: {flops_per_token(cfg) / 1e9:.2f} GFLOP/token, "
                      f"{cfg['batch_size'] * cfg['seq_len']} tokens/step, {cfg['steps']} steps")
                for impl in impls:
                    cmd = (anvil_command(args.anvil, os.path.join(work, "run"), cfg, args.warmup,
                                         offload=impl == "anvil-offload", profile=args.profile)
                           if impl.startswith("anvil") else torch_command(cfg, impl == "torch-compile",
                                                                 args.warmup))
                    print(f"  {impl}: {' '.join(cmd)}")
        return 0

    start = time.time()
    ceiling = gemm_ceiling_tflops()
    results, torch_version = {}, None
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            cfg = CONFIGS[name]
            results[name] = {}
            for impl in impls:
                if time.time() - start > args.time_budget:
                    results[name][impl] = {"error": "skipped: time budget spent"}
                    continue
                result, error = measure(args, name, cfg, impl, work)
                if error:
                    results[name][impl] = {"error": error}
                else:
                    result["flops_per_token"] = flops_per_token(cfg)
                    torch_version = result.get("torch", torch_version)
                    results[name][impl] = result
                rate = None if error else f"{result['tokens_per_s']:.0f} tok/s"
                print(f"{name} {impl}: {error or rate}", flush=True)
    text = markdown(results, ceiling, torch_version)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gemm_ceiling_tflops": ceiling, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
