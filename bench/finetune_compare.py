#!/usr/bin/env python3
"""LoRA SFT and full fine-tuning throughput of `anvil finetune` against transformers + PEFT.

One invocation makes, in a temporary folder, a random Llama model saved by Hugging Face
transformers (LlamaForCausalLM(config).save_pretrained, safetensors, float32; the byte-level
BPE tokenizer tests/tokenizer/fixtures/llama3_like with a tokenizer_config.json, so anvil and
transformers both load the folder) and a synthetic chat JSONL data set. `anvil prepare --sft`
renders it once (llama3 template, packed, loss on assistant tokens); both sides train on those
shards: anvil reads the folder, the torch side reads the same .tok files (tokens + loss mask)
and draws the same windows in the same order (docs/formats.md "Sample order": windows of
seq_len + 1 tokens, SplitMix64 Fisher-Yates per epoch, training.seed), so step k of both sides
is the same batch with the same loss mask. Packed windows use plain causal attention on both
sides (anvil --training.doc_mask=false; transformers' SDPA with is_causal).

Four runs per (dtype, repetition), alternated (anvil LoRA, PEFT LoRA, anvil full, torch full,
then again for --reps repetitions, so slow drifts of a shared machine hit every side alike), at
the same thread count, best repetition of each kept:
  anvil-lora   anvil finetune --lora.r R --lora.alpha A --lora.targets=q_proj,k_proj,v_proj,o_proj
  peft-lora    transformers LlamaForCausalLM + peft LoraConfig(same r, alpha, dropout, targets),
               torch.optim.AdamW over the adapters
  anvil-full   anvil finetune --full
  torch-full   transformers LlamaForCausalLM, AdamW over every weight
Same batch x seq_len, grad_accum 1, learning rates (2e-4 LoRA, 2e-5 full), warm-up + cosine
schedule, AdamW betas/eps, no weight decay, grad clip 1.0, LoRA dropout 0.05. Loss: mean
cross-entropy over the loss-masked targets of the batch on both sides. bf16: anvil
--training.dtype=bf16 (LoRA: bf16 frozen base; full: f32 master weights); torch.autocast bf16
with the LoRA base loaded in bf16 (adapters f32, as PEFT keeps them) and the full model in f32.
Tokens/s is steady state (the first 2 steps excluded, as anvil's trainer); step time is
batch x seq_len over it; peak RSS is each process's own maximum resident set size. Step-1 losses
of the two sides are printed as a check that they train on the same data from the same weights.

Usage:
  bench/finetune_compare.py --anvil /tmp/bench-anvil/anvil --python /tmp/bench-venv/bin/python \
      [--threads 2] [--reps 3] [--dtypes f32,bf16] [--json results.json]
  bench/finetune_compare.py --anvil build/anvil --python VENV/bin/python --quick   # smoke test
--python must have torch, transformers, peft and safetensors. Prints a Markdown report; --json
FILE keeps raw results. Not a test: nothing in CI runs it.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from cpu_compare import cpu_model, load_average, ratio, run_json  # noqa: E402  (shared helpers)
TOKENIZER_FIXTURE = os.path.join(REPO, "tests", "tokenizer", "fixtures", "llama3_like.tokenizer.json")

# ~25M parameters: the 32M benchmark architecture of cpu_compare.py with the fixture's vocabulary.
MODEL = dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1408)
SHAPE = dict(batch_size=4, seq_len=512, steps=8, records=1500)
QUICK_MODEL = dict(dim=128, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=352)
QUICK_SHAPE = dict(batch_size=2, seq_len=128, steps=5, records=200)
LORA = dict(r=8, alpha=16.0, dropout=0.05, targets=["q_proj", "k_proj", "v_proj", "o_proj"])
LR = {"lora": 2e-4, "full": 2e-5}
OPTIMIZER = dict(warmup_steps=1, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, grad_clip=1.0)
SEED = 1337
WARMUP_STEPS_EXCLUDED = 2
SIDES = ("anvil-lora", "peft-lora", "anvil-full", "torch-full")


WORDS = ("the a of to and in is it that for on with as was by at this from be have or are not "
         "model train data token layer weight step loss rate batch window memory thread cache "
         "river mountain city garden window music letter number question answer reason light "
         "small large quick slow early late bright quiet simple careful honest useful").split()


# ------------------------------------------------------------------ fixture (runs in --python)


def make_fixture(args):
    """Writes the HF model folder and the JSONL data set (called as --make-fixture)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, os.path.join(REPO, "tools"))
    from sft_fixtures import LLAMA3_TEMPLATE  # the Llama 3 Instruct template, written out once

    with open(TOKENIZER_FIXTURE) as f:
        tok = json.load(f)
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vocab = max(max(tok["model"]["vocab"].values()), max(ids.values())) + 1
    m = json.loads(args.fixture_model)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=m["dim"], intermediate_size=m["ffn_dim"],
        num_hidden_layers=m["n_layers"], num_attention_heads=m["n_heads"],
        num_key_value_heads=m["n_kv_heads"], max_position_embeddings=args.fixture_seq_len,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        bos_token_id=ids["<|begin_of_text|>"], eos_token_id=ids["<|end_of_text|>"],
        attention_dropout=0.0, torch_dtype="float32")
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).float()
    model.save_pretrained(args.make_fixture, safe_serialization=True)
    shutil.copyfile(TOKENIZER_FIXTURE, os.path.join(args.make_fixture, "tokenizer.json"))
    with open(os.path.join(args.make_fixture, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                   "eos_token": "<|end_of_text|>", "chat_template": LLAMA3_TEMPLATE,
                   "model_max_length": args.fixture_seq_len}, f, indent=1)
    AutoTokenizer.from_pretrained(args.make_fixture)  # transformers reads the folder
    rng = random.Random(SEED)

    def sentence(lo, hi):
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."

    with open(args.fixture_data, "w") as f:
        for i in range(args.fixture_records):
            messages = []
            if i % 3 == 0:
                messages.append({"role": "system", "content": sentence(4, 12)})
            for _ in range(rng.randint(1, 2)):
                messages.append({"role": "user", "content": sentence(8, 40) + " " + sentence(4, 20)})
                messages.append({"role": "assistant",
                                 "content": " ".join(sentence(6, 30) for _ in range(rng.randint(1, 4)))})
            f.write(json.dumps({"messages": messages}) + "\n")
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()), "vocab_size": vocab,
                      "torch_version": torch.__version__}))


# ------------------------------------------------------------ torch side (runs in --python)


def read_shards(folder, split):
    """Returns (tokens int64, loss mask uint8) of the split's parts in order (docs/formats.md)."""
    import numpy as np

    tokens, masks = [], []
    for path in sorted(glob.glob(os.path.join(folder, f"{split}-*.tok"))):
        blob = np.fromfile(path, dtype=np.uint8)
        header = blob[:128].tobytes()
        assert header[:8] == b"ANVTOK\x00\x1a", path
        token_bytes = int.from_bytes(header[12:16], "little")
        flags = int.from_bytes(header[16:20], "little")
        n = int.from_bytes(header[24:32], "little")
        docs = int.from_bytes(header[32:40], "little")
        dtype = np.uint16 if token_bytes == 2 else np.uint32
        tokens.append(blob[128:128 + n * token_bytes].view(dtype).astype(np.int64))
        mask_at = 128 + (n * token_bytes + 7) // 8 * 8 + 8 * docs
        masks.append(blob[mask_at:mask_at + n] if flags & 1 else np.ones(n, dtype=np.uint8))
    return np.concatenate(tokens), np.concatenate(masks)


MASK64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def epoch_permutation(n, seed, epoch):
    """anvil's data::epoch_permutation: Fisher-Yates from the top with SplitMix64."""
    state = mix64(mix64(seed) ^ epoch)  # hash_pair(seed, epoch)
    perm = list(range(n))
    for k in range(n, 1, -1):
        out = mix64(state)
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        j = (out * k) >> 64
        perm[k - 1], perm[j] = perm[j], perm[k - 1]
    return perm


def batches(folder, seq_len, batch_size, steps, seed):
    """Yields (inputs, labels) int64 (batch, seq_len) of each step as anvil's dataloader draws
    them; labels are the targets with -100 where the loss mask is 0."""
    import numpy as np
    import torch

    tokens, mask = read_shards(folder, "train")
    windows = (len(tokens) - 1) // seq_len
    perms = {}
    for step in range(steps):
        rows_in, rows_lab = [], []
        for i in range(step * batch_size, (step + 1) * batch_size):
            epoch = i // windows
            if epoch not in perms:
                perms[epoch] = epoch_permutation(windows, seed, epoch)
            w = perms[epoch][i % windows]
            span = tokens[w * seq_len:w * seq_len + seq_len + 1]
            labels = span[1:].copy()
            labels[mask[w * seq_len + 1:w * seq_len + seq_len + 1] == 0] = -100
            rows_in.append(span[:-1])
            rows_lab.append(labels)
        yield torch.from_numpy(np.stack(rows_in)), torch.from_numpy(np.stack(rows_lab))


def lr_at(step, lr, warmup, steps):
    """Warm-up + cosine to 0 as anvil's LrSchedule (min_lr 0)."""
    import math

    if step <= warmup:
        return lr * step / warmup
    p = min(max((step - warmup) / max(steps - warmup, 1), 0.0), 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * p)) * lr


def torch_worker(args):
    """One torch fine-tuning run (called as --torch-worker lora|full); JSON summary on stdout."""
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    lora = args.torch_worker == "lora"
    bf16 = args.dtype == "bf16"
    model = LlamaForCausalLM.from_pretrained(
        args.model, torch_dtype=torch.bfloat16 if (bf16 and lora) else torch.float32,
        attn_implementation="sdpa")
    model.config.use_cache = False
    peft_version = None
    if lora:
        import peft
        from peft import LoraConfig, get_peft_model

        peft_version = peft.__version__
        model = get_peft_model(model, LoraConfig(
            r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
            target_modules=LORA["targets"], bias="none", task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    lr = LR[args.torch_worker]
    kwargs = dict(lr=lr, betas=(OPTIMIZER["beta1"], OPTIMIZER["beta2"]), eps=OPTIMIZER["eps"],
                  weight_decay=OPTIMIZER["weight_decay"])
    try:
        optimizer, adamw = torch.optim.AdamW(params, fused=True, **kwargs), "fused"
    except (TypeError, RuntimeError):
        optimizer, adamw = torch.optim.AdamW(params, foreach=True, **kwargs), "foreach"
    tokens_per_step = args.batch_size * args.seq_len
    losses, seconds = [], []
    data = batches(args.data, args.seq_len, args.batch_size, args.steps, SEED)
    for step in range(1, args.steps + 1):
        begin = time.perf_counter()
        inputs, labels = next(data)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=inputs).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1),
                               ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, OPTIMIZER["grad_clip"])
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, lr, OPTIMIZER["warmup_steps"], args.steps)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        seconds.append(time.perf_counter() - begin)
    steady = seconds[WARMUP_STEPS_EXCLUDED:] or seconds
    print(json.dumps({
        "steps": args.steps, "tokens_per_s": tokens_per_step * len(steady) / sum(steady),
        "step_seconds": seconds, "losses": losses, "final_loss": losses[-1],
        "trainable_parameters": trainable,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "peft_version": peft_version, "threads": torch.get_num_threads(), "adamw": adamw,
        "attention": model.config._attn_implementation if hasattr(model.config, "_attn_implementation")
        else "?"}), flush=True)


# --------------------------------------------------------------------------- driver


def anvil_command(args, run_dir, full, dtype):
    overrides = {
        "logging.json": "true", "training.eval_steps": 0, "training.eval_every": 0,
        "checkpoint.every": 0, "checkpoint.keep": 1, "training.steps": args.shape["steps"],
        "training.batch_size": args.shape["batch_size"], "training.seq_len": args.shape["seq_len"],
        "training.grad_accum": 1, "training.dtype": dtype, "training.doc_mask": "false",
        "training.seed": SEED, "optimizer.lr": LR["full" if full else "lora"],
        "optimizer.min_lr": 0, "optimizer.schedule": "cosine",
        **{f"optimizer.{k}": v for k, v in OPTIMIZER.items()},
    }
    cmd = [args.anvil, "finetune", "--model", args.model_dir, "--data", args.shards,
           "--run-dir", run_dir, "--resume", "never", "--threads", str(args.threads)]
    if full:
        cmd.append("--full")
    else:
        cmd += ["--lora.r", str(LORA["r"]), "--lora.alpha", str(LORA["alpha"]),
                "--lora.dropout", str(LORA["dropout"]), "--lora.targets=" + ",".join(LORA["targets"])]
    return cmd + [f"--{k}={v}" for k, v in overrides.items()]


def torch_command(args, mode, dtype):
    return [args.python, os.path.abspath(__file__), "--torch-worker", mode, "--model",
            args.model_dir, "--data", args.shards, "--threads", str(args.threads), "--dtype", dtype,
            "--batch-size", str(args.shape["batch_size"]), "--seq-len", str(args.shape["seq_len"]),
            "--steps", str(args.shape["steps"])]


def anvil_metrics(run_dir):
    """Returns (losses, per-step tokens/s) from the run's metrics.jsonl."""
    losses, rates = [], []
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                record = json.loads(line)
                if record.get("type") == "train":
                    losses.append(record["loss"])
                    rates.append(record["tokens_per_s"])
    except OSError:
        pass
    return losses, rates


def anvil_trainable(stdout_and_err):
    for line in stdout_and_err.splitlines():
        if "trainable" in line and "memory:" in line:
            return line.split("memory:", 1)[1].strip()
    return None


def run_side(args, side, dtype, work, tag):
    if side.startswith("anvil"):
        run_dir = os.path.join(work, f"run-{tag}")
        summary, error = run_json(anvil_command(args, run_dir, side == "anvil-full", dtype),
                                  args.timeout)
        if summary:
            summary["losses"], rates = anvil_metrics(run_dir)
            tokens_per_step = args.shape["batch_size"] * args.shape["seq_len"]
            summary["step_seconds"] = [tokens_per_step / r if r else None for r in rates]
            summary["memory_line"] = anvil_trainable(summary["stdout"] + summary["stderr"])
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        summary, error = run_json(torch_command(args, side.split("-")[1], dtype), args.timeout)
    if summary:
        summary.pop("stdout", None)
        summary.pop("stderr", None)
    return summary, error


def prepare(args, work):
    """Makes the model folder, the JSONL and the shards; returns the fixture's summary."""
    args.model_dir = os.path.join(work, "model")
    data = os.path.join(work, "sft.jsonl")
    args.shards = os.path.join(work, "shards")
    fixture, error = run_json(
        [args.python, os.path.abspath(__file__), "--make-fixture", args.model_dir,
         "--fixture-data", data, "--fixture-model", json.dumps(args.model),
         "--fixture-seq-len", str(max(args.shape["seq_len"], 2048)),
         "--fixture-records", str(args.shape["records"])], args.timeout)
    if error:
        sys.exit(f"finetune_compare: making the model with {args.python} failed: {error}")
    proc = subprocess.run([args.anvil, "prepare", "--sft", "--input", data, "--tokenizer",
                           args.model_dir, "--out", args.shards, "--packing", "true",
                           "--split", "0.95,0.05,0", "--seed", str(SEED)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"finetune_compare: anvil prepare --sft failed: {proc.stderr.strip()[-300:]}")
    with open(os.path.join(args.shards, "meta.json")) as f:
        meta = json.load(f)
    fixture.pop("stdout", None)
    fixture.pop("stderr", None)
    fixture["meta"] = {k: meta.get(k) for k in ("documents", "tokens", "sft", "splits")}
    return fixture


def measure(args, work):
    results = {}
    for dtype in args.dtypes:
        runs = {s: [] for s in SIDES}
        errors = {s: None for s in SIDES}
        for rep in range(args.reps):
            for side in SIDES:
                if errors[side]:
                    continue  # a side that failed once will fail again
                begin = time.perf_counter()
                summary, error = run_side(args, side, dtype, work, f"{dtype}-{rep}-{side}")
                if error:
                    errors[side] = error
                else:
                    summary["wall_s"] = time.perf_counter() - begin
                    runs[side].append(summary)
                print(f"# {dtype} rep {rep + 1}/{args.reps} {side}: "
                      + (error or f"{summary['tokens_per_s']:.0f} tok/s, step-1 loss "
                                  f"{summary['losses'][0] if summary['losses'] else float('nan'):.5f}, "
                                  f"{summary['wall_s']:.0f} s"),
                      file=sys.stderr, flush=True)
        results[dtype] = {"runs": runs, "errors": errors}
    return results


def summarise(args, results):
    tokens_per_step = args.shape["batch_size"] * args.shape["seq_len"]
    table = {}
    for dtype, r in results.items():
        rows = {}
        for side in SIDES:
            runs = r["runs"][side]
            best = max(runs, key=lambda x: x["tokens_per_s"]) if runs else None
            rows[side] = {
                "error": r["errors"][side],
                "tokens_per_s_all": [x["tokens_per_s"] for x in runs],
                "tokens_per_s": best["tokens_per_s"] if best else None,
                "step_s": tokens_per_step / best["tokens_per_s"] if best else None,
                "peak_rss_mb": max(x["peak_rss_mb"] for x in runs) if runs else None,
                "step1_loss": best["losses"][0] if best and best["losses"] else None,
                "final_loss": best["final_loss"] if best else None,
            }
        table[dtype] = rows
    return table


def fmt(value, pattern):
    return "n/a" if value is None else pattern.format(value)


def pair_ratios(results, dtype, a, b):
    ra, rb = results[dtype]["runs"][a], results[dtype]["runs"][b]
    return [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(ra, rb)]


def range_text(values):
    return (f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
            if values else "n/a")


def report(c, table, results):
    lines = []
    add = lines.append
    s = c["shape"]
    add(f"Measured {c['started']} with `bench/finetune_compare.py{' --quick' if c['quick'] else ''}"
        f" --reps {c['reps']} --threads {c['threads']}` ({c['reps']} alternating repetitions per "
        f"side, best kept; {s['steps']} steps each, first {WARMUP_STEPS_EXCLUDED} excluded).")
    add("")
    add(f"- CPU: {c['cpu']} ({c['cpus']} logical CPUs visible), {c['threads']} threads for every "
        "side; load average before/after: " f"{c['load_before']} / {c['load_after']}")
    add(f"- anvil: {c['anvil']} (built {c['anvil_built']}; repository HEAD {c['anvil_commit']})")
    add(f"- torch {c['versions'].get('torch', '?')}, transformers "
        f"{c['versions'].get('transformers', '?')}, peft {c['versions'].get('peft', '?')} "
        f"({c['python']}); attention {c['versions'].get('attention', '?')}, AdamW "
        f"{c['versions'].get('adamw', '?')}")
    f = c["fixture"]
    add(f"- model: random Llama, dim {c['model']['dim']}, {c['model']['n_layers']} layers, "
        f"{c['model']['n_heads']} heads / {c['model']['n_kv_heads']} kv heads, ffn "
        f"{c['model']['ffn_dim']}, vocab {f['vocab_size']} (llama3_like tokenizer), untied head: "
        f"{f['parameters']:,} parameters, f32 safetensors from transformers' save_pretrained")
    sft = f["meta"].get("sft") or {}
    train = (f["meta"].get("splits") or {}).get("train", {})
    add(f"- data: {sft.get('records', '?')} synthetic chat records, llama3 template, packed, "
        f"{train.get('tokens', '?'):,} train tokens ({sft.get('loss_tokens', '?'):,} with loss "
        f"over all splits); batch {s['batch_size']} x {s['seq_len']} tokens, causal attention over "
        "the packed window on both sides (anvil --training.doc_mask=false)")
    add(f"- LoRA r {LORA['r']}, alpha {LORA['alpha']:g}, dropout {LORA['dropout']}, targets "
        f"{','.join(LORA['targets'])}; lr {LR['lora']:g} (LoRA) / {LR['full']:g} (full), warm-up "
        f"{OPTIMIZER['warmup_steps']} + cosine, AdamW betas {OPTIMIZER['beta1']}/"
        f"{OPTIMIZER['beta2']}, no weight decay, clip {OPTIMIZER['grad_clip']}")
    add("")
    add("| dtype | run | tok/s | step s | peak RSS MB | step-1 loss | tok/s per repetition |")
    add("|---|---|---:|---:|---:|---:|---|")
    for dtype, rows in table.items():
        for side in SIDES:
            r = rows[side]
            add(f"| {dtype} | {side} | {fmt(r['tokens_per_s'], '{:.0f}')} | "
                f"{fmt(r['step_s'], '{:.3f}')} | {fmt(r['peak_rss_mb'], '{:.0f}')} | "
                f"{fmt(r['step1_loss'], '{:.5f}')} | "
                f"{', '.join(f'{v:.0f}' for v in r['tokens_per_s_all']) or r['error']} |")
    add("")
    add("| dtype | anvil/PEFT LoRA tok/s | anvil/torch full tok/s | anvil full/LoRA step time | "
        "torch full/PEFT LoRA step time | anvil/PEFT per pair: median (range) |")
    add("|---|---:|---:|---:|---:|---:|")
    for dtype, rows in table.items():
        t = {k: rows[k]["tokens_per_s"] for k in SIDES}
        add(f"| {dtype} | {fmt(ratio(t['anvil-lora'], t['peft-lora']), '{:.2f}')} | "
            f"{fmt(ratio(t['anvil-full'], t['torch-full']), '{:.2f}')} | "
            f"{fmt(ratio(t['anvil-lora'], t['anvil-full']), '{:.2f}')} | "
            f"{fmt(ratio(t['peft-lora'], t['torch-full']), '{:.2f}')} | "
            f"{range_text(pair_ratios(results, dtype, 'anvil-lora', 'peft-lora'))} |")
    notes = [f"{dtype} {side}: {rows[side]['error']}" for dtype, rows in table.items()
             for side in SIDES if rows[side]["error"]]
    if notes:
        add("")
        add("Failures:")
        for note in notes:
            add(f"- {note}")
    return "\n".join(lines)


def git_head():
    proc = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True)
    return proc.stdout.strip() or "?"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anvil", default=os.path.join(REPO, "build", "anvil"))
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch, transformers and peft (default: this one)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=None, help="repetitions per side (default 3)")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default 8)")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--quick", action="store_true", help="a tiny model, 5 steps, 1 repetition")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--json", default="", help="also write the raw results here")
    p.add_argument("--report-from", default="", help="print the report of an earlier --json file")
    # Internal modes, run under --python.
    p.add_argument("--make-fixture", default="", help=argparse.SUPPRESS)
    p.add_argument("--fixture-data", default="", help=argparse.SUPPRESS)
    p.add_argument("--fixture-model", default="", help=argparse.SUPPRESS)
    p.add_argument("--fixture-seq-len", type=int, default=2048, help=argparse.SUPPRESS)
    p.add_argument("--fixture-records", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--torch-worker", choices=["lora", "full"], help=argparse.SUPPRESS)
    p.add_argument("--model", default="", help=argparse.SUPPRESS)
    p.add_argument("--data", default="", help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="f32", help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--seq-len", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.make_fixture:
        return make_fixture(args)
    if args.torch_worker:
        return torch_worker(args)
    if args.report_from:
        with open(args.report_from) as f:
            saved = json.load(f)
        print(report(saved["context"], saved["table"], saved["results"]))
        return
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    args.reps = args.reps or (1 if args.quick else 3)
    args.model = QUICK_MODEL if args.quick else MODEL
    args.shape = dict(QUICK_SHAPE if args.quick else SHAPE)
    if args.steps:
        args.shape["steps"] = args.steps
    if not os.access(args.anvil, os.X_OK):
        sys.exit(f"finetune_compare: {args.anvil} is not an executable (pass --anvil)")

    now = datetime.datetime.now().astimezone
    context = {
        "started": now().strftime("%Y-%m-%d %H:%M %Z"), "load_before": load_average(),
        "quick": args.quick, "reps": args.reps, "threads": args.threads, "cpu": cpu_model(),
        "cpus": os.cpu_count(), "anvil": args.anvil, "anvil_commit": git_head(),
        "anvil_built": datetime.datetime.fromtimestamp(os.path.getmtime(args.anvil))
        .astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "python": args.python, "model": args.model, "shape": args.shape,
    }
    begin = time.perf_counter()
    work = tempfile.mkdtemp(prefix="anvil-finetune-compare-")
    try:
        context["fixture"] = prepare(args, work)
        print(f"# model {context['fixture']['parameters']:,} parameters; data "
              f"{context['fixture']['meta'].get('tokens')} tokens", file=sys.stderr, flush=True)
        results = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    context["load_after"] = load_average()
    versions = {}
    for r in results.values():
        for side in ("peft-lora", "torch-full"):
            for run in r["runs"][side]:
                versions.update(torch=run["torch_version"], transformers=run["transformers_version"],
                                attention=run["attention"], adamw=run["adamw"])
                if run.get("peft_version"):
                    versions["peft"] = run["peft_version"]
    context["versions"] = versions
    table = summarise(args, results)
    print(report(context, table, results))
    print(f"# total {time.perf_counter() - begin:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"context": context, "table": table, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
