#!/usr/bin/env python3
"""Checks that bench/torch_llama.py trains the same model as `anvil train`.

The PyTorch script initialises the weights and writes them as HF-named safetensors; anvil
starts from that file (--model.init_from) on the same synthetic batches (both implement
anvil's counter-based token hash) with the same optimizer and schedule. The step-1 loss
(before any update) must agree to --tolerance (1e-5 in f32); later steps show how closely the optimizer
and schedule follow (f32 rounding differences grow slowly with each update).

Usage: bench/verify_parity.py --anvil build/anvil --python /path/to/python [--steps 5]
Exit status 0 when the step-1 loss matches, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def model_args(cfg):
    """Returns (anvil overrides, torch_llama.py flags) for one architecture and batch."""
    anvil = [f"--model.dim={cfg.dim}", f"--model.n_layers={cfg.n_layers}",
             f"--model.n_heads={cfg.n_heads}", f"--model.n_kv_heads={cfg.n_kv_heads}",
             f"--model.ffn_dim={cfg.ffn_dim}", f"--model.vocab_size={cfg.vocab_size}",
             f"--model.max_seq_len={cfg.seq_len}",
             f"--model.tie_embeddings={'true' if cfg.tie_embeddings else 'false'}",
             f"--training.steps={cfg.steps}", f"--training.batch_size={cfg.batch_size}",
             f"--training.seq_len={cfg.seq_len}", f"--training.grad_accum={cfg.grad_accum}",
             f"--training.dtype={cfg.dtype}", f"--training.seed={cfg.seed}",
             f"--optimizer.warmup_steps={cfg.warmup_steps}"]
    torch = ["--dim", cfg.dim, "--n-layers", cfg.n_layers, "--n-heads", cfg.n_heads,
             "--n-kv-heads", cfg.n_kv_heads, "--ffn-dim", cfg.ffn_dim,
             "--vocab-size", cfg.vocab_size, "--steps", cfg.steps,
             "--batch-size", cfg.batch_size, "--seq-len", cfg.seq_len,
             "--grad-accum", cfg.grad_accum, "--dtype", cfg.dtype, "--seed", cfg.seed,
             "--warmup-steps", cfg.warmup_steps]
    if cfg.tie_embeddings:
        torch.append("--tie-embeddings")
    if cfg.torch_f32_head:
        torch.append("--f32-head")
    return anvil, [str(x) for x in torch]


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"verify_parity: {' '.join(cmd)} failed ({proc.returncode}):\n"
                 f"{proc.stderr[-3000:]}{proc.stdout[-2000:]}")
    return proc.stdout


def anvil_losses(run_dir):
    losses = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "train":
                losses[record["step"]] = (record["loss"], record["grad_norm"])
    return [losses[s] for s in sorted(losses)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anvil", required=True, help="path of the anvil executable")
    p.add_argument("--python", default=sys.executable, help="interpreter that has torch")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--n-layers", type=int, default=8)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--n-kv-heads", type=int, default=4)
    p.add_argument("--ffn-dim", type=int, default=1408)
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--tie-embeddings", action="store_true")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--torch-f32-head", action="store_true",
                   help="bf16: keep the torch logits f32 as anvil does (autocast makes them "
                        "bf16, after which the two trajectories drift apart within a few steps)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest accepted |anvil - torch| of the step-1 loss (default 1e-5 for "
                        "f32; 2e-3 for bf16, whose rounding points differ between the two)")
    cfg = p.parse_args()
    if cfg.tolerance is None:
        cfg.tolerance = 1e-5 if cfg.dtype == "f32" else 2e-3

    anvil_overrides, torch_flags = model_args(cfg)
    with tempfile.TemporaryDirectory(prefix="anvil-parity-") as tmp:
        init = os.path.join(tmp, "init.safetensors")
        torch_out = run([cfg.python, os.path.join(HERE, "torch_llama.py"), *torch_flags,
                         "--threads", str(cfg.threads), "--save-init", init])
        torch_summary = json.loads(torch_out.strip().splitlines()[-1])
        run_dir = os.path.join(tmp, "run")
        run([cfg.anvil, "train", "--data.synthetic=true", "--logging.json=true",
             "--training.eval_steps=0", "--checkpoint.every=0", f"--model.init_from={init}",
             "--run-dir", run_dir, "--resume", "never", "--threads", str(cfg.threads),
             *anvil_overrides])
        anvil_steps = anvil_losses(run_dir)

    print(f"torch {torch_summary['torch_version']} ({torch_summary['attention']} attention, "
          f"{torch_summary['adamw']} AdamW), dtype {cfg.dtype}, "
          f"{cfg.batch_size}x{cfg.seq_len} tokens, {cfg.steps} steps")
    print(f"{'step':>4} {'anvil loss':>12} {'torch loss':>12} {'|diff|':>10} "
          f"{'anvil gnorm':>12} {'torch gnorm':>12}")
    diffs = []
    for step, ((a_loss, a_norm), t_loss, t_norm) in enumerate(
            zip(anvil_steps, torch_summary["losses"], torch_summary["grad_norms"]), start=1):
        diffs.append(abs(a_loss - t_loss))
        print(f"{step:>4} {a_loss:>12.7f} {t_loss:>12.7f} {diffs[-1]:>10.2e} "
              f"{a_norm:>12.6f} {t_norm:>12.6f}")
    ok = bool(diffs) and diffs[0] <= cfg.tolerance
    print(f"step-1 loss {'matches' if ok else 'DIFFERS'}: |diff| = {diffs[0]:.2e} "
          f"(tolerance {cfg.tolerance:.0e}); largest over {len(diffs)} steps {max(diffs):.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
