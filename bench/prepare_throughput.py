#!/usr/bin/env python3
"""Measures `anvil prepare` against Hugging Face `datasets` + `tokenizers` on the same input.

    python3 bench/prepare_throughput.py [--anvil build/anvil] [--mb 64] [--threads 1 2]

Writes a synthetic corpus of about --mb MB as JSON Lines and as Parquet (row groups of 8192
rows) into --workdir, then for each thread count:
  * anvil prepare --threads T on each input: MB/s of input and the process's peak RSS;
  * datasets.load_dataset(format) followed by Dataset.map(batched=True, num_proc=T) with a
    `tokenizers` Tokenizer.encode_batch over the text column (the usual HF preprocessing), the
    same tokenizer file, a fresh cache folder per run: MB/s of the whole (load + map).
The input is several times anvil's chunk budget (8 MiB of text), so anvil's peak RSS shows
whether memory follows the chunk or the corpus. Run by hand, not in CI; it needs pyarrow,
datasets and tokenizers (pip install pyarrow datasets tokenizers), which it looks for in the
running Python.

Measured 2026-12-04 on the 2-core development machine (shared with other builds), 40 MB JSONL
(18.4 MB Parquet), the llama3_like fixture tokenizer; MB/s of the JSONL size:
  anvil prepare      JSONL 15.7 (1 thread) 24.4 (2)   Parquet 21.8 (1) 32.1 (2)
  datasets load+map  JSONL  1.5 (1 proc)    2.4 (2)   Parquet  2.2 (1)  2.7 (2)
anvil's peak RSS stayed at 254-256 MB for 10, 40 and 80 MB of JSONL (80 MB is 10x the chunk
budget; the floor is the binary's libraries) and 306-336 MB for Parquet (one row group).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

WORDS = ("the of and to in is was for on that with as by at from his her an which were are "
         "this be had not or but have one all their they there been has when who will more "
         "would if no out so said what up its about into than them can only other new some "
         "could time these two may then do first any my now such like our over man me even "
         "most made after also did many before must through back years where much your way "
         "well down should because each just those people how too little state good very "
         "make world still own see men work long get here between both life being under "
         "never day same another know while last might us great old year off come since "
         "against go came right used take three states himself few house use during without "
         "again place american around however home small found thought went say part once "
         "general high upon school every don't does got united left number course war until "
         "always away something fact though water less public put think almost hand enough "
         "far took head yet government system better set told nothing night end why called "
         "didn't eyes find going look asked later knew point next city business give group "
         "\u00e9t\u00e9 na\u00efve caf\u00e9 \u00fcber stra\u00dfe \u4e16\u754c "
         "\u043c\u0438\u0440").split()


def write_corpus(path, megabytes, seed=1):
    rng = random.Random(seed)
    target = megabytes * 1_000_000
    written = 0
    rows = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            words = rng.randint(20, 600)
            text = " ".join(rng.choice(WORDS) for _ in range(words))
            line = json.dumps({"id": rows, "text": text}, ensure_ascii=False) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            rows += 1
    return rows


def write_parquet(jsonl, parquet):
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    table = pj.read_json(jsonl)
    pq.write_table(table, parquet, row_group_size=8192, compression="snappy")


def run_measured(command):
    """Runs `command`; returns (seconds, peak RSS in MB of that process)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    stderr = process.stderr.read().decode()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(command)}\n{stderr}")
    return seconds, usage.ru_maxrss / 1024.0


def anvil_prepare(args, source, threads, out):
    shutil.rmtree(out, ignore_errors=True)
    return run_measured([args.anvil, "prepare", "--input", source, "--tokenizer", args.tokenizer,
                         "--out", out, "--threads", str(threads)])


HF_SCRIPT = r"""
import sys, time
from datasets import load_dataset, disable_progress_bars
from tokenizers import Tokenizer
disable_progress_bars()
kind, path, tokenizer_path, threads, cache = sys.argv[1:6]
tokenizer = Tokenizer.from_file(tokenizer_path)
def encode(batch):
    return {"ids": [e.ids for e in tokenizer.encode_batch(batch["text"])]}
start = time.perf_counter()
data = load_dataset(kind, data_files=path, split="train", cache_dir=cache)
loaded = time.perf_counter()
data = data.map(encode, batched=True, batch_size=1000, num_proc=int(threads),
                remove_columns=data.column_names)
tokens = sum(len(ids) for ids in data["ids"])
print(loaded - start, time.perf_counter() - loaded, tokens)
"""


def hf_prepare(args, kind, source, threads):
    cache = os.path.join(args.workdir, "hf-cache")
    shutil.rmtree(cache, ignore_errors=True)
    result = subprocess.run([sys.executable, "-c", HF_SCRIPT, kind, source, args.tokenizer,
                             str(threads), cache], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"datasets run failed:\n{result.stderr[-3000:]}")
    load, map_seconds, tokens = result.stdout.split()
    return float(load), float(map_seconds), int(tokens)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anvil", default=os.path.join(root, "build", "anvil"))
    parser.add_argument("--tokenizer", default=os.path.join(
        root, "tests", "tokenizer", "fixtures", "llama3_like.tokenizer.json"))
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--workdir", default="/tmp/anvil-prepare-bench")
    parser.add_argument("--skip-hf", action="store_true")
    args = parser.parse_args()

    os.makedirs(args.workdir, exist_ok=True)
    jsonl = os.path.join(args.workdir, "corpus.jsonl")
    parquet = os.path.join(args.workdir, "corpus.parquet")
    rows = write_corpus(jsonl, args.mb)
    write_parquet(jsonl, parquet)
    sizes = {"jsonl": os.path.getsize(jsonl), "parquet": os.path.getsize(parquet)}
    text_mb = os.path.getsize(jsonl) / 1e6
    print(f"corpus: {rows} documents, JSONL {sizes['jsonl'] / 1e6:.1f} MB, "
          f"Parquet {sizes['parquet'] / 1e6:.1f} MB; tokenizer {args.tokenizer}")
    print("MB/s are of the JSONL size (the same text for both formats)")
    print(f"{'tool':<28}{'input':<9}{'threads':>8}{'seconds':>10}{'MB/s':>9}{'peak RSS MB':>13}")
    for threads in args.threads:
        for kind, source in (("jsonl", jsonl), ("parquet", parquet)):
            seconds, rss = anvil_prepare(args, source, threads, os.path.join(args.workdir, "out"))
            print(f"{'anvil prepare':<28}{kind:<9}{threads:>8}{seconds:>10.2f}"
                  f"{text_mb / seconds:>9.1f}{rss:>13.0f}")
            if args.skip_hf:
                continue
            load, map_seconds, _ = hf_prepare(args, "json" if kind == "jsonl" else "parquet",
                                              source, threads)
            total = load + map_seconds
            print(f"{'datasets load+map':<28}{kind:<9}{threads:>8}{total:>10.2f}"
                  f"{text_mb / total:>9.1f}{'':>13}  (load {load:.1f} s, map {map_seconds:.1f} s)")
    shutil.rmtree(os.path.join(args.workdir, "out"), ignore_errors=True)


if __name__ == "__main__":
    main()
