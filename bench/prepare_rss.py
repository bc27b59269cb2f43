#!/usr/bin/env python3
"""Peak RSS of `anvil prepare` (and of `prepare --sft`, the reading `anvil finetune --data`
does) against input size: memory must be flat in the input (issue 45 point 4: within 10% from
20 to 320 MB).

  bench/prepare_rss.py [--anvil build/anvil] [--tokenizer T] [--sizes 20,80,320]
                       [--kinds jsonl,jsonl.zst,parquet,sft,sft.zst] [--threads 2] [--work DIR]

For each size S (MB of JSON Lines) it writes, once, into --work: web-S.jsonl (records of
varied length drawn from a fixed word list with a fixed seed), web-S.jsonl.zst (the zstd tool),
web-S.parquet (pyarrow's defaults: snappy, and one row group for each of these sizes) and
chat-S.jsonl (+ .zst) of alpaca records, then runs each kind in a child process and reads its
peak RSS from wait4's rusage (the child's own high-water mark). Prints one Markdown table row
per kind: the peak RSS at each size and the spread (max / min - 1). Needs the zstd tool and,
for Parquet, pyarrow (.deps/venv/bin/python has it).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

WORDS = ("the of and to in is was for on that with as by at from his her which an be this "
         "river mountain library engine window garden history music theory station harbor "
         "winter signal bridge market village letter forest silver island").split()


def write_jsonl(path, megabytes, chat):
    rng = random.Random(megabytes)
    target = megabytes * 1000 * 1000
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 400)))
            if chat:
                record = {"instruction": "Summarise: " + text[:200], "output": text}
            else:
                record = {"text": text}
            line = json.dumps(record) + "\n"
            out.write(line)
            written += len(line)


def write_parquet(jsonl, path):
    """Writes the texts with pyarrow's defaults (`pq.write_table`: snappy, row groups of up to
    1Mi rows), so each of these files is a single row group: the common case that a reader
    holding a whole row group gets wrong."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(jsonl, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    pq.write_table(pa.table({"text": pa.array(texts, type=pa.string())}), path)


def make_inputs(work, megabytes):
    paths = {}
    for name, chat in (("web", False), ("chat", True)):
        jsonl = os.path.join(work, f"{name}-{megabytes}.jsonl")
        if not os.path.exists(jsonl):
            write_jsonl(jsonl + ".tmp", megabytes, chat)
            os.replace(jsonl + ".tmp", jsonl)
        if not os.path.exists(jsonl + ".zst"):
            subprocess.run(["zstd", "-q", "-3", "-f", jsonl, "-o", jsonl + ".zst"], check=True)
        paths[name] = jsonl
    parquet = os.path.join(work, f"web-{megabytes}.parquet")
    if not os.path.exists(parquet):
        write_parquet(paths["web"], parquet + ".tmp")
        os.replace(parquet + ".tmp", parquet)
    return {"jsonl": paths["web"], "jsonl.zst": paths["web"] + ".zst", "parquet": parquet,
            "sft": paths["chat"], "sft.zst": paths["chat"] + ".zst"}


def peak_rss_mb(command):
    start = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    stderr = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"prepare_rss: {' '.join(command)} failed: {stderr.strip()}")
    return usage.ru_maxrss / 1024.0, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anvil", default="build/anvil")
    parser.add_argument("--tokenizer",
                        default="tests/tokenizer/fixtures/llama3_like.tokenizer.json")
    parser.add_argument("--sizes", default="20,80,320")
    parser.add_argument("--kinds", default="jsonl,jsonl.zst,parquet,sft,sft.zst")
    parser.add_argument("--threads", default="2")
    parser.add_argument("--work", default="/tmp/anvil-prepare-rss")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    os.makedirs(args.work, exist_ok=True)
    inputs = {size: make_inputs(args.work, size) for size in sizes}
    print("| input | " + " | ".join(f"{s} MB: peak RSS (time)" for s in sizes) + " | spread |")
    print("|---|" + "---|" * (len(sizes) + 1))
    for kind in kinds:
        cells, peaks = [], []
        for size in sizes:
            out = os.path.join(args.work, "out")
            shutil.rmtree(out, ignore_errors=True)
            command = [args.anvil, "prepare", "--input", inputs[size][kind], "--tokenizer",
                       args.tokenizer, "--out", out, "--threads", args.threads]
            if kind.startswith("sft"):
                command.append("--sft")
            peak, seconds = peak_rss_mb(command)
            peaks.append(peak)
            cells.append(f"{peak:.0f} MB ({seconds:.0f} s)")
        spread = max(peaks) / min(peaks) - 1
        print(f"| {kind} | " + " | ".join(cells) + f" | {spread * 100:.1f}% |", flush=True)
    shutil.rmtree(os.path.join(args.work, "out"), ignore_errors=True)


if __name__ == "__main__":
    main()
