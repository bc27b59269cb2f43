#!/usr/bin/python3
"""Writes the PEFT LoRA fixtures that tests/model/lora_peft_test.cpp checks anvil against.

`transformers` builds a tiny random LlamaForCausalLM (hidden 64, 2 layers, GQA 4/2, f32,
fixed seed, norm weights perturbed away from 1) and saves it with save_pretrained under
tests/model/golden/peft_llama/base/. `peft` wraps it with LoraConfig(r=4, lora_alpha=8,
all 7 target modules, dropout 0), the lora_B matrices get non-zero random values (PEFT
initialises them to zero, which would hide B from every check), and the adapter is saved with
save_pretrained under .../adapter/. Then, for fixed tokens, the script records in
.../expected.safetensors:
  tokens         (B, T) i32 input ids
  logits         (B, T, V) f32 logits of the adapted model (eval mode)
  loss           (1) f32 mean next-token cross-entropy (labels = tokens, HF shifting)
  grad.<name>    f32 gradient of that loss for every adapter tensor <name> as saved in
                 adapter_model.safetensors

Usage (Debian python3-torch 1.13 + pip transformers 4.46.3 + peft 0.13.2; never in CI):
  /usr/bin/python3 tools/golden/make_peft_golden.py            # regenerate the fixtures
  /usr/bin/python3 tools/golden/make_peft_golden.py --check DIR
      loads the fixture base model with the adapter anvil saved in DIR (adapter_config.json +
      adapter_model.safetensors) through PeftModel.from_pretrained, runs the fixture tokens and
      compares with the logits anvil wrote to DIR/anvil_logits.safetensors ("logits"); prints
      the max abs error and exits 1 above 1e-4.
"""

import argparse
import json
import os
import sys

import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "model",
                          "golden", "peft_llama")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SEED = 1234
BATCH, SEQ = 2, 12


def build_base():
    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                         initializer_range=0.1, tie_word_embeddings=False, bos_token_id=1,
                         eos_token_id=2, attn_implementation="eager")
    model = LlamaForCausalLM(config).float()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(0.2 * torch.randn_like(param))
    return model


def fixture_tokens():
    generator = torch.Generator().manual_seed(SEED + 1)
    return torch.randint(0, 128, (BATCH, SEQ), generator=generator, dtype=torch.int64)


def saved_name(param_name):
    # PeftModel parameter "...q_proj.lora_A.default.weight" is saved as "...q_proj.lora_A.weight".
    return param_name.replace(".default.", ".")


def generate():
    base_dir = os.path.join(GOLDEN_DIR, "base")
    adapter_dir = os.path.join(GOLDEN_DIR, "adapter")
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    base = build_base()
    base.save_pretrained(base_dir, safe_serialization=True)

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, bias="none",
                      task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    torch.manual_seed(SEED + 2)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.1 * torch.randn_like(param))
    # The model card needs jinja2 and is not part of the fixture.
    model.create_or_update_model_card = lambda *args, **kwargs: None
    model.save_pretrained(adapter_dir)
    # The base name recorded in the config would be a temporary path; keep the fixture stable.
    config_path = os.path.join(adapter_dir, "adapter_config.json")
    with open(config_path) as f:
        adapter_config = json.load(f)
    adapter_config["base_model_name_or_path"] = "peft_llama/base"
    with open(config_path, "w") as f:
        json.dump(adapter_config, f, indent=2, sort_keys=True)
        f.write("\n")
    readme = os.path.join(adapter_dir, "README.md")
    if os.path.exists(readme):
        os.remove(readme)

    tokens = fixture_tokens()
    model.eval()
    output = model(input_ids=tokens, labels=tokens)
    output.loss.backward()
    tensors = {
        "tokens": tokens.to(torch.int32).contiguous(),
        "logits": output.logits.detach().float().contiguous(),
        "loss": output.loss.detach().float().reshape(1).contiguous(),
    }
    for name, param in model.named_parameters():
        if param.requires_grad:
            tensors["grad." + saved_name(name)] = param.grad.detach().float().contiguous()
    save_file(tensors, os.path.join(GOLDEN_DIR, "expected.safetensors"),
              metadata={"transformers": transformers.__version__, "peft": peft.__version__,
                        "torch": torch.__version__})
    print(f"wrote {GOLDEN_DIR}: loss {output.loss.item():.6f}, "
          f"{sum(1 for k in tensors if k.startswith('grad.'))} adapter gradients")


def check(directory):
    base = LlamaForCausalLM.from_pretrained(os.path.join(GOLDEN_DIR, "base"),
                                            torch_dtype=torch.float32,
                                            attn_implementation="eager")
    model = PeftModel.from_pretrained(base, directory)
    model.eval()
    tokens = load_file(os.path.join(GOLDEN_DIR, "expected.safetensors"))["tokens"].long()
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()
    anvil = load_file(os.path.join(directory, "anvil_logits.safetensors"))["logits"]
    error = (logits - anvil).abs().max().item()
    print(f"PEFT on the HF base with anvil's adapter vs anvil logits: max abs error {error:.3e}")
    return 0 if error <= 1e-4 else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", metavar="DIR", help="compare an anvil-saved adapter in PEFT")
    args = parser.parse_args()
    if args.check:
        sys.exit(check(args.check))
    generate()


if __name__ == "__main__":
    main()
