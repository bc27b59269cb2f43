#!/usr/bin/env python3
"""Single-thread encode throughput: anvil vs Hugging Face `tokenizers` (and tiktoken for Meta's
Llama 3 tokenizer.model when it is installed), on the same text, checking the ids agree.

    python3 bench/tokenizer_bench.py [--anvil build/anvil] [--tokenizer tokenizer.json]
                                     [--mb 20] [--llama3 ~/.cache/anvil/llama3/tokenizer.model]

The text is built from the fortunes package, Python standard-library source and multilingual
samples, one document per line. Without --tokenizer, a 32k-vocab byte-level BPE in the Llama 3
layout is trained by HF on part of the text (cached under /tmp/anvil-tokenizer-bench/).
HF runs with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false through encode_batch (and
encode_batch_fast when present). anvil runs `anvil tokenize --no-special --input FILE` with its
output sent to a file; its encode time is that run's time minus the time of a run on an empty
file (process start and tokenizer loading). Times are CPU seconds (user + system) so that a
busy machine does not skew the ratio; wall seconds are printed beside them. Prints MB/s for
each and anvil / HF.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"  # must be set before tokenizers starts its pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import base64
import glob
import json
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import tokenizer_fixtures as fixtures  # noqa: E402  (corpus pieces, Llama 3 pattern, Meta split)

from tokenizers import Tokenizer  # noqa: E402

CACHE = "/tmp/anvil-tokenizer-bench"


def build_text(megabytes):
    """Returns lines (documents without newlines) totalling about `megabytes` MB of UTF-8."""
    pieces = []
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if "." in os.path.basename(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            pieces.extend(doc.replace("\n", " ").strip() for doc in f.read().split("\n%\n"))
    stdlib = os.path.dirname(os.__file__)
    for path in sorted(glob.glob(os.path.join(stdlib, "*.py")))[:120]:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        pieces.extend("\t".join(lines[i:i + 20]) for i in range(0, len(lines), 20))
    pieces.extend(fixtures.MULTILINGUAL * 200)
    pieces = [p.replace("\n", " ") for p in pieces if p]
    target = megabytes * 1_000_000
    out, size, i = [], 0, 0
    while size < target:
        line = pieces[i % len(pieces)]
        if i >= len(pieces):  # later rounds vary the text a little so caches are not trivial
            line = f"{i} {line[::-1] if i % 3 == 0 else line}"
        out.append(line)
        size += len(line.encode("utf-8")) + 1
        i += 1
    return out


def train_bench_tokenizer(lines):
    path = os.path.join(CACHE, "tokenizer.json")
    if os.path.exists(path):
        return path
    from tokenizers import Regex, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(fixtures.LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines[:len(lines) // 4], trainer=trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True
    os.makedirs(CACHE, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    return path


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class CpuTimer:
    """Measures CPU seconds of this process (or of finished children) and wall seconds."""

    def __init__(self, children=False):
        self.clock = children_cpu if children else time.process_time

    def __enter__(self):
        self.cpu, self.wall = self.clock(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = self.clock() - self.cpu, time.perf_counter() - self.wall


def time_anvil(anvil, tokenizer, text_path, empty_path, out_path):
    """Returns (encode CPU seconds, total wall seconds, load CPU seconds, ids per line)."""
    def run(path):
        with CpuTimer(children=True) as timer, open(out_path, "wb") as out:
            subprocess.run([anvil, "tokenize", "--tokenizer", tokenizer, "--no-special",
                            "--input", path], stdout=out, check=True,
                           env=dict(os.environ, ANVIL_NUM_THREADS="1"))
        return timer
    startup = min(run(empty_path).cpu for _ in range(2))
    total = run(text_path)
    with open(out_path) as f:
        ids = [json.loads(line) for line in f]
    return total.cpu - startup, total.wall, startup, ids


def compare(name, want, got):
    bad = sum(1 for a, b in zip(want, got) if a != b) + abs(len(want) - len(got))
    print(f"  ids {name}: {'identical' if bad == 0 else f'{bad} lines differ'} "
          f"({len(want)} lines)")
    return bad == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--anvil", default=os.path.join(ROOT, "build", "src", "anvil"))
    parser.add_argument("--tokenizer", help="a tokenizer.json (default: train one with HF)")
    parser.add_argument("--mb", type=float, default=20, help="text size in MB")
    parser.add_argument("--llama3", default=fixtures.LLAMA3_CACHE,
                        help="Meta Llama 3 tokenizer.model for the tiktoken comparison")
    args = parser.parse_args()

    lines = build_text(args.mb)
    mb = sum(len(line.encode("utf-8")) + 1 for line in lines) / 1e6
    os.makedirs(CACHE, exist_ok=True)
    text_path = os.path.join(CACHE, "text.txt")
    empty_path = os.path.join(CACHE, "empty.txt")
    out_path = os.path.join(CACHE, "anvil_ids.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    open(empty_path, "w").close()
    tokenizer_path = args.tokenizer or train_bench_tokenizer(lines)
    print(f"text: {mb:.1f} MB in {len(lines)} lines; tokenizer: {tokenizer_path}")

    hf = Tokenizer.from_file(tokenizer_path)
    with CpuTimer() as timer:
        hf_ids = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    print(f"HF tokenizers encode_batch (1 thread): {mb / timer.cpu:7.2f} MB/s "
          f"({timer.cpu:.2f} s CPU, {timer.wall:.2f} s wall)")
    best_hf = timer.cpu
    if hasattr(hf, "encode_batch_fast"):
        with CpuTimer() as timer:
            hf.encode_batch_fast(lines, add_special_tokens=False)
        best_hf = min(best_hf, timer.cpu)
        print(f"HF tokenizers encode_batch_fast:       {mb / timer.cpu:7.2f} MB/s "
              f"({timer.cpu:.2f} s CPU, {timer.wall:.2f} s wall)")

    encode_cpu, wall, startup, anvil_ids = time_anvil(args.anvil, tokenizer_path, text_path,
                                                      empty_path, out_path)
    print(f"anvil tokenize (1 thread):             {mb / encode_cpu:7.2f} MB/s "
          f"({encode_cpu:.2f} s CPU encoding; {wall:.2f} s wall incl. {startup:.2f} s CPU load)")
    print(f"  anvil / fastest HF: {best_hf / encode_cpu:.2f}x")
    ok = compare("anvil vs HF", hf_ids, anvil_ids)

    if args.llama3 and os.path.exists(args.llama3):
        import tiktoken
        ranks = {}
        with open(args.llama3) as f:
            for line in f:
                if line.strip():
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
        specials = fixtures.llama3_special_tokens()
        enc = tiktoken.Encoding(name="llama3", pat_str=fixtures.LLAMA3_PATTERN,
                                mergeable_ranks=ranks,
                                special_tokens={s: len(ranks) + i for i, s in enumerate(specials)})
        with CpuTimer() as timer:
            tt_ids = [fixtures.meta_llama3_encode(enc, line, None) for line in lines]
        print(f"\nLlama 3 tokenizer.model: tiktoken (Meta split, 1 thread): "
              f"{mb / timer.cpu:7.2f} MB/s ({timer.cpu:.2f} s CPU, {timer.wall:.2f} s wall)")
        encode_cpu, wall, startup, anvil_ids = time_anvil(args.anvil, args.llama3, text_path,
                                                          empty_path, out_path)
        print(f"anvil tokenize (1 thread):                                "
              f"{mb / encode_cpu:7.2f} MB/s ({encode_cpu:.2f} s CPU encoding; {wall:.2f} s wall "
              f"incl. {startup:.2f} s CPU load)")
        print(f"  anvil / tiktoken: {timer.cpu / encode_cpu:.2f}x")
        ok = compare("anvil vs tiktoken", tt_ids, anvil_ids) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
