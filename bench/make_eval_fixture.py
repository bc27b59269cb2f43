#!/usr/bin/env python3
"""Regenerates tests/eval/golden/lm_eval_prompts.json: the exact (context, continuation) strings
lm-evaluation-harness 0.4.13 asks a model to score for a few made-up documents of every task
`anvil eval --task` implements.

Method: the documents below were written for this fixture (they are not items of the real
datasets). Inside this process `datasets.load_dataset` is replaced so that each lm-eval task,
built from the harness's own YAML (TaskManager + get_task_dict), downloads these documents
instead of its Hugging Face dataset. The requests are then built by the harness itself, as its
evaluator does (set_config num_fewshot, set_fewshot_seed(1234), build_all_requests), and each
Instance's arguments -- the pair handed to the model's loglikelihood, before _encode_pair moves
trailing context spaces into the continuation -- are recorded. Nothing here re-implements a
template; the fixture is what the harness produced.

Tricky cases covered: an MMLU subject with underscores (the description spells it with spaces),
questions with leading/trailing whitespace (the template strips them), CSV-hostile characters,
only the first N dev documents used as shots; hellaswag " [title]" (becomes ". ", which leaves
a context ending in a space), "[step]"/"[header]" brackets removed, triple and double spaces, a
lowercase ctx_b capitalized (str.capitalize also lowercases the rest), an empty ctx_b and
non-ASCII text; ARC with 3 and 5 choices and numeric labels "1".."4"; winogrande with the blank
at the start and before punctuation; boolq.

Usage (the eval venv; see bench/eval_parity.py):
  /work/evalvenv/bin/python bench/make_eval_fixture.py [--out tests/eval/golden/lm_eval_prompts.json]
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import eval_tasks  # noqa: E402  (sets the offline environment before datasets is imported)

# ------------------------------------------------------------------ made-up documents (anvil schema)

MMLU_US_HISTORY_DEV = [
    {"subject": "high_school_us_history",
     "question": "Which river did the fictional town of Millbrook grow up beside?",
     "choices": ["The Blue River", "The Red River", "The Long River", "No river"], "answer": 1},
    {"subject": "high_school_us_history",
     "question": "  In the made-up \"Treaty of Oakfield\", who signed first?\n",
     "choices": ["The mayor", "The governor, then the mayor", "Nobody", "A clerk"], "answer": 0},
    {"subject": "high_school_us_history",
     "question": "This third dev question must not appear with two shots.",
     "choices": ["w", "x", "y", "z"], "answer": 3},
]
MMLU_US_HISTORY_TEST = [
    {"subject": "high_school_us_history",
     "question": "\n  What did the (invented) 1850 Lantern Act regulate?  \n",
     "choices": ["Street lamps", "Canal tolls, fees and \"dues\"", "Ferry times", "Schools"],
     "answer": 0},
    {"subject": "high_school_us_history",
     "question": "Which statement about the imaginary Café Compact is true?\nPick one.",
     "choices": ["It was signed in Zürich", "It named three ports", "It lasted 10 years",
                 "It was never ratified"], "answer": 2},
    {"subject": "high_school_us_history",
     "question": "Choose the odd one out: 1, 2, 3, 5",
     "choices": [" 1", "2 ", "3", "5, maybe"], "answer": 3},
]
MMLU_ALGEBRA_DEV = [
    {"subject": "abstract_algebra", "question": "Find x if x + 1 = 2 in the integers.",
     "choices": ["0", "1", "2", "3"], "answer": 1},
]
MMLU_ALGEBRA_TEST = [
    {"subject": "abstract_algebra", "question": "How many elements does the trivial group have?",
     "choices": ["0", "1", "2", "infinitely many"], "answer": 1},
]

HELLASWAG = [
    {"activity_label": "Repotting a cactus",
     "ctx_a": "[header] How to repot a cactus [title] Wear thick gloves.",
     "ctx_b": "lift the plant   by its base [title]",
     "endings": ["[step] Set it in the new pot.  Fill soil around it.",
                 "Water it every hour [substeps] even at night.",
                 "Throw the pot away.", "Sing to the cactus."], "label": "0"},
    {"activity_label": "Baking bread",
     "ctx_a": "A woman kneads dough on a wooden table.",
     "ctx_b": "the woman in the RED apron",
     "endings": ["shapes the dough into a loaf.", "paints the table blue.",
                 "puts the dough in the fridge and leaves.", "reads a book."], "label": "0"},
    {"activity_label": "Café crème",
     "ctx_a": "Un serveur prépare un café à Zürich.  Il sourit.",
     "ctx_b": "écume le lait",
     "endings": ["et le verse doucement — voilà.", "et part.", "et chante « bravo ».",
                 "puis ferme la porte."], "label": "2"},
    {"activity_label": "Skateboarding",
     "ctx_a": "A boy rides a skateboard down a ramp.",
     "ctx_b": "",
     "endings": ["He lands a jump.", "He falls asleep.", "He eats soup.", "He flies away."],
     "label": "0"},
]

ARC_EASY = [
    {"question": "Which of these is a liquid at room temperature?",
     "choices": {"text": ["Water", "Ice", "Steam"], "label": ["A", "B", "C"]},
     "answerKey": "A"},
    {"question": "A made-up planet has two moons. How many moons does it have?",
     "choices": {"text": ["1", "2", "3", "4", "5"], "label": ["A", "B", "C", "D", "E"]},
     "answerKey": "B"},
]
ARC_CHALLENGE = [
    {"question": "Which tool would best measure the mass of a small stone?",
     "choices": {"text": ["a ruler", "a balance", "a thermometer", "a stopwatch"],
                 "label": ["1", "2", "3", "4"]}, "answerKey": "2"},
    {"question": "What happens to most metals when they are heated?",
     "choices": {"text": ["They expand.", "They shrink.", "They vanish.", "They freeze."],
                 "label": ["A", "B", "C", "D"]}, "answerKey": "A"},
]

PIQA = [
    {"goal": "How do you keep a paper cup from tipping over in the wind?",
     "sol1": "Put a few coins in the bottom of the cup.",
     "sol2": "Fill the cup with helium.", "label": 0},
    {"goal": "To soften brown sugar that has gone hard,",
     "sol1": "bake it at 250°C for an hour.",
     "sol2": "seal it in a jar with a slice of bread overnight.", "label": 1},
]

WINOGRANDE = [
    {"sentence": "The lamp did not fit on the shelf because _ was too tall.",
     "option1": "the lamp", "option2": "the shelf", "answer": "1"},
    {"sentence": "_ gave Maria the book because Emily had finished reading it.",
     "option1": "Emily", "option2": "Maria", "answer": "1"},
    {"sentence": "Jon lent his bike to Sam, so the bike now belongs with _.",
     "option1": "Jon", "option2": "Sam", "answer": "2"},
]

BOOLQ = [
    {"passage": "The Millbrook ferry is a made-up boat that crosses the Blue River twice a day.",
     "question": "does the millbrook ferry cross the river", "label": 1},
    {"passage": "In this invented story, the lighthouse at Gray Point was never painted red.",
     "question": "was the gray point lighthouse painted red", "label": 0},
]

# (fixture entry, lm-eval task name, num_fewshot, {split: docs}, the split evaluated, the
# (path, name) the task's YAML asks load_dataset for)
ENTRIES = [
    ("mmlu", "mmlu_high_school_us_history", 2,
     {"dev": MMLU_US_HISTORY_DEV, "test": MMLU_US_HISTORY_TEST}, "test",
     ("cais/mmlu", "high_school_us_history")),
    ("mmlu", "mmlu_abstract_algebra", 0,
     {"dev": MMLU_ALGEBRA_DEV, "test": MMLU_ALGEBRA_TEST}, "test",
     ("cais/mmlu", "abstract_algebra")),
    ("hellaswag", "hellaswag", 0, {"validation": HELLASWAG}, "validation",
     ("Rowan/hellaswag", None)),
    ("arc_easy", "arc_easy", 0, {"test": ARC_EASY}, "test", ("allenai/ai2_arc", "ARC-Easy")),
    ("arc_challenge", "arc_challenge", 0, {"test": ARC_CHALLENGE}, "test",
     ("allenai/ai2_arc", "ARC-Challenge")),
    ("piqa", "piqa", 0, {"validation": PIQA}, "validation", ("baber/piqa", None)),
    ("winogrande", "winogrande", 0, {"validation": WINOGRANDE}, "validation",
     ("allenai/winogrande", "winogrande_xl")),
    ("boolq", "boolq", 0, {"validation": BOOLQ}, "validation", ("aps/super_glue", "boolq")),
]


def make_resolver():
    import datasets

    table = {}
    for _, _, _, splits, _, key in ENTRIES:
        table[key] = splits

    def resolve(path, name):
        splits = table[(path, name)]
        return eval_tasks.with_empty_train(datasets.DatasetDict(
            {s: datasets.Dataset.from_list(docs) for s, docs in splits.items()}))

    return resolve


def build_entry(entry, task_name, shots, splits, eval_split, manager):
    from lm_eval.tasks import get_task_dict

    task = eval_tasks.leaf_tasks(get_task_dict([task_name], manager))[task_name]
    task.set_config(key="num_fewshot", value=shots)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(limit=None, rank=0, world_size=1)
    eval_docs = list(task.eval_docs)
    by_doc = {}
    for inst in task.instances:
        by_doc.setdefault(inst.doc_id, []).append(inst)
    requests = []
    for doc_id in sorted(by_doc):
        insts = sorted(by_doc[doc_id], key=lambda i: i.idx)
        doc = eval_docs[doc_id]
        requests.append({"doc": doc_id, "gold": eval_tasks.gold_index(task, doc),
                         "pairs": [list(i.arguments) for i in insts],
                         "choices": list(task.doc_to_choice(doc))})
    out = {"task": entry, "lm_eval_task": task_name, "num_fewshot": shots,
           "target_split": eval_split}
    if entry == "mmlu":
        out["subject"] = task_name[len("mmlu_"):]
        out["fewshot_docs"] = splits["dev"]
    out["docs"] = splits[eval_split]
    out["requests"] = requests
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "eval", "golden",
                                                      "lm_eval_prompts.json"))
    args = parser.parse_args()

    from importlib.metadata import version

    from lm_eval.tasks import TaskManager

    eval_tasks.patch_load_dataset(make_resolver())
    manager = TaskManager()
    tasks = [build_entry(*e[:5], manager) for e in ENTRIES]
    fixture = {
        "generator": f"lm-eval {version('lm_eval')} task machinery (TaskManager, "
                     "build_all_requests) via bench/make_eval_fixture.py; made-up documents",
        "notes": "pairs are Instance.arguments (context, continuation) before _encode_pair; "
                 "choices are doc_to_choice (acc_norm divides by their character length)",
        "tasks": tasks,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {sum(len(t['requests']) for t in tasks)} docs in {len(tasks)} entries")


if __name__ == "__main__":
    main()
