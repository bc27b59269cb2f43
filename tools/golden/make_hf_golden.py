#!/usr/bin/python3
"""Writes the Hugging Face parity fixtures that tests/eval/hf_parity_test.cpp checks anvil against.

For each family below the `transformers` library itself builds a tiny random model
(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM), perturbs the norm weights and biases so
they are not trivially 1 and 0, and saves it with save_pretrained(safe_serialization=True) in the
family's storage dtype (F32, BF16 or F16; one family sharded with an index) under
tests/eval/golden/<family>/. The model is then reloaded from those files in float32 (eager
attention) and the script records, next to the weights:
  logits.safetensors  "logits.<i>": (T_i, V) f32 logits of the fixed input sequence i
  golden.json         the inputs, 20 greedy tokens (argmax of a full forward per step, ties to the
                      lowest id as torch.argmax), the smallest top-1/top-2 logit gap met while
                      generating, and the library versions
The llama3 family also carries a byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json)
and perplexity references computed with the code of transformers' "Perplexity of fixed-length
models" guide on tests/eval/golden/eval_text.txt, window by window.

Usage (Debian python3-torch 1.13 + pip transformers 4.46.3, see docs/interop.md):
  /usr/bin/python3 tools/golden/make_hf_golden.py                  # regenerate every fixture
  /usr/bin/python3 tools/golden/make_hf_golden.py --check-export DIR --family llama3
      loads an anvil export with AutoModelForCausalLM / AutoTokenizer and compares its logits
      with the family's recorded ones (exit status 1 on a mismatch).
"""

import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "eval",
                          "golden")
GREEDY_TOKENS = 20
PROMPT_TOKENS = 8
BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"

COMMON = dict(num_hidden_layers=2, vocab_size=256, initializer_range=0.1, bos_token_id=1,
              eos_token_id=2)

FAMILIES = {
    # Llama 2 style: multi-head attention, theta 10000, untied head, stored in F32.
    "llama2": dict(kind="llama", dtype=torch.float32, seed=11, lengths=(24, 40),
                   config=dict(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                               num_key_value_heads=4, max_position_embeddings=128,
                               rope_theta=10000.0, rms_norm_eps=1e-5)),
    # Llama 3 style: GQA 4/2, theta 500000, BF16, sharded by save_pretrained (with an index),
    # plus a tokenizer and perplexity references.
    "llama3": dict(kind="llama", dtype=torch.bfloat16, seed=12, lengths=(16, 32),
                   shard="60KB", tokenizer=True,
                   config=dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=256,
                               rope_theta=500000.0, rms_norm_eps=1e-5, vocab_size=320,
                               bos_token_id=0, eos_token_id=1)),
    # Llama 3.1 style: rope_scaling "llama3" with original_max_position_embeddings 64, so with
    # head_dim 16 and theta 500000 the kept, smoothed and slowed frequency bands all occur.
    "llama31": dict(kind="llama", dtype=torch.bfloat16, seed=13, lengths=(16, 72),
                    config=dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=512,
                                rope_theta=500000.0, rms_norm_eps=1e-5,
                                rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 64})),
    # Llama 3.2 style: tied embeddings (no lm_head.weight in the file), llama3 rope scaling, and
    # an explicit head_dim whose q width (4 * 24) differs from hidden_size.
    "llama32": dict(kind="llama", dtype=torch.bfloat16, seed=14, lengths=(24, 40),
                    config=dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=24, max_position_embeddings=256,
                                rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                                rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 64})),
    # SmolLM style: a Llama config with 3 query heads sharing 1 kv head, tied embeddings.
    "smollm": dict(kind="llama", dtype=torch.bfloat16, seed=15, lengths=(24, 40),
                   config=dict(hidden_size=48, intermediate_size=96, num_attention_heads=3,
                               num_key_value_heads=1, max_position_embeddings=128,
                               rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)),
    # Mistral: sliding_window 32 < max_position_embeddings 128; anvil caps the context at the
    # window (where the window changes nothing), so every input here is <= 32 tokens.
    "mistral": dict(kind="mistral", dtype=torch.float16, seed=16, lengths=(12, 32),
                    config=dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=128,
                                sliding_window=32, rope_theta=1000000.0, rms_norm_eps=1e-5)),
    # Qwen2: q/k/v biases, tied embeddings, rms eps 1e-6, theta 1e6.
    "qwen2": dict(kind="qwen2", dtype=torch.bfloat16, seed=17, lengths=(24, 40),
                  config=dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=256,
                              rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                              use_sliding_window=False, sliding_window=256)),
}

CLASSES = {"llama": (LlamaConfig, LlamaForCausalLM), "mistral": (MistralConfig, MistralForCausalLM),
           "qwen2": (Qwen2Config, Qwen2ForCausalLM)}

# Perplexity references: (seq_len, stride) settings run with the guide's loop.
PERPLEXITY_SETTINGS = [(16, 16), (16, 8), (16, 5)]


def build_model(spec):
    config_cls, model_cls = CLASSES[spec["kind"]]
    config = config_cls(**{**COMMON, **spec["config"]}, attn_implementation="eager")
    torch.manual_seed(spec["seed"])
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(0.1 * torch.randn_like(param))
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.05)
    return model


def train_tokenizer(text):
    """Returns a byte-level BPE fast tokenizer whose post-processor prepends BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS)


def input_sequences(spec, vocab):
    generator = torch.Generator().manual_seed(1000 + spec["seed"])
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in spec["lengths"]]


def greedy(model, prompt):
    """Returns GREEDY_TOKENS argmax tokens and the smallest top-1/top-2 gap seen."""
    ids = torch.tensor([prompt])
    out, min_gap = [], float("inf")
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):
            last = model(ids).logits[0, -1]
            top = torch.topk(last, 2).values
            min_gap = min(min_gap, float(top[0] - top[1]))
            token = int(torch.argmax(last))
            out.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out, min_gap


def guide_perplexity(model, ids, max_length, stride):
    """Runs the loop of transformers' perplexity guide, keeping every window's numbers."""
    encodings = torch.tensor([ids])
    seq_len = encodings.size(1)
    windows, nll_sum, n_tokens, prev_end_loc = [], 0.0, 0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc
        input_ids = encodings[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            loss = float(model(input_ids, labels=target_ids).loss)
        scored = int((target_ids[:, 1:] != -100).sum())  # labels left after the internal shift
        num_loss_tokens = int((target_ids != -100).sum()) - target_ids.size(0)
        windows.append(dict(begin=begin_loc, end=end_loc, scored=scored, mean_loss=loss))
        nll_sum += loss * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    exact_sum = sum(w["mean_loss"] * w["scored"] for w in windows)
    exact_count = sum(w["scored"] for w in windows)
    return dict(seq_len=max_length, stride=stride, windows=windows,
                loss=exact_sum / exact_count, tokens=exact_count,
                guide_formula_loss=nll_sum / n_tokens)


def write_family(name, spec, eval_text):
    out_dir = os.path.join(GOLDEN_DIR, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    model = build_model(spec)
    model.to(spec["dtype"]).save_pretrained(out_dir, safe_serialization=True,
                                            max_shard_size=spec.get("shard", "5GB"))
    tokenizer = None
    if spec.get("tokenizer"):
        tokenizer = train_tokenizer(eval_text)
        tokenizer.save_pretrained(out_dir)
        for extra in ("special_tokens_map.json",):
            path = os.path.join(out_dir, extra)
            if os.path.exists(path):
                os.remove(path)  # tokenizer_config.json already names bos/eos
    # The reference numbers come from the saved files, read back in float32.
    model = AutoModelForCausalLM.from_pretrained(out_dir, torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    sequences = input_sequences(spec, vocab)
    logits = {}
    with torch.no_grad():
        for i, seq in enumerate(sequences):
            logits[f"logits.{i}"] = model(torch.tensor([seq])).logits[0].contiguous()
    save_file(logits, os.path.join(out_dir, "logits.safetensors"), metadata={"format": "pt"})
    prompt = sequences[0][:PROMPT_TOKENS]
    tokens, min_gap = greedy(model, prompt)
    assert min_gap > 1e-4, f"{name}: greedy decoding has a near tie ({min_gap}); change the seed"
    golden = dict(family=name, architecture=model.config.architectures[0],
                  transformers_version=transformers.__version__, torch_version=torch.__version__,
                  storage_dtype=str(spec["dtype"]).replace("torch.", ""),
                  inputs=sequences, prompt=prompt, greedy_tokens=tokens,
                  greedy_min_top2_gap=min_gap)
    if tokenizer is not None:
        ids = tokenizer(eval_text)["input_ids"]
        golden["eval_text_ids"] = ids
        golden["perplexity"] = [guide_perplexity(model, ids, length, stride)
                                for length, stride in PERPLEXITY_SETTINGS]
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"{name}: {out_dir} ({size // 1024} KB), greedy gap {min_gap:.4g}")


def check_export(export_dir, family):
    """Loads an anvil export with transformers and compares logits with the recorded ones."""
    golden_dir = os.path.join(GOLDEN_DIR, family)
    with open(os.path.join(golden_dir, "golden.json")) as f:
        golden = json.load(f)
    expected = load_file(os.path.join(golden_dir, "logits.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(export_dir, torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    worst = 0.0
    with torch.no_grad():
        for i, seq in enumerate(golden["inputs"]):
            got = model(torch.tensor([seq])).logits[0]
            worst = max(worst, float((got - expected[f"logits.{i}"]).abs().max()))
    tokens, _ = greedy(model, golden["prompt"])
    ok = worst <= 1e-5 and tokens == golden["greedy_tokens"]
    print(f"{family}: transformers {transformers.__version__} loaded {export_dir} as "
          f"{type(model).__name__}; max abs logit error {worst:.3g}; greedy tokens "
          f"{'match' if tokens == golden['greedy_tokens'] else 'DIFFER'}")
    if any(os.path.exists(os.path.join(export_dir, n)) for n in ("tokenizer.json",)):
        tokenizer = AutoTokenizer.from_pretrained(export_dir)
        ids = tokenizer("Hello world")["input_ids"]
        print(f"{family}: tokenizer {type(tokenizer).__name__} bos={tokenizer.bos_token!r} "
              f"eos={tokenizer.eos_token!r} 'Hello world' -> {ids}")
        ok = ok and tokenizer.bos_token is not None and tokenizer.eos_token is not None
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check-export", help="an anvil export to load with transformers")
    parser.add_argument("--family", help="the golden family the export came from")
    args = parser.parse_args()
    if args.check_export:
        sys.exit(0 if check_export(args.check_export, args.family) else 1)
    with open(os.path.join(GOLDEN_DIR, "eval_text.txt")) as f:
        eval_text = f.read()
    for name, spec in FAMILIES.items():
        write_family(name, spec, eval_text)


if __name__ == "__main__":
    main()
