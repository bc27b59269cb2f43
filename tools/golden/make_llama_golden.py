#!/usr/bin/python3
"""Writes the PyTorch golden files that tests/model/golden_test.cpp checks anvil's Llama against.

Each file under tests/model/golden/ holds, for one tiny model: the weights (Hugging Face names),
a fixed (B, T) batch (tokens, targets, optional loss mask and document ids), the logits, the mean
loss, the gradient of that loss for every parameter ("grad." + name), and ten AdamW steps with
global grad-norm clipping and a warmup + cosine schedule (the loss, the learning rate and the
grad norm before clipping at each step). The model is plain PyTorch written to compute exactly
what transformers' LlamaForCausalLM / Qwen2ForCausalLM compute: rotate-half RoPE (with the
"llama3" frequency scaling), repeat_kv GQA, eager softmax attention with a causal (and document)
mask, RMSNorm in f32 as x * rsqrt(mean(x^2) + eps) * weight, SwiGLU MLP, lm head or tied
embeddings, and mean cross-entropy over counted tokens (ignore_index -100 and a 0/1 loss mask).
Everything runs in float32 on the CPU.

Run with the system interpreter (Debian python3-torch): /usr/bin/python3 tools/golden/make_llama_golden.py
The safetensors files are written by hand (8-byte header length, JSON, data) so no extra
package is needed.
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "model",
                       "golden")

# Field names match anvil::LlamaConfig.
MODELS = {
    # Llama 3 style: GQA 4/2, explicit head_dim (q width 64 != dim 32), untied head.
    "llama_tiny": {
        "config": dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=64,
                       vocab_size=256, max_seq_len=64, rope_theta=500000.0,
                       rope_scaling_factor=0.0, rope_low_freq_factor=1.0,
                       rope_high_freq_factor=4.0, rope_original_max_position=8192,
                       norm_eps=1e-5, tie_embeddings=False, attention_bias=False),
        "batch": 2, "seq": 16, "seed": 1234, "loss_mask": False, "doc_ids": False,
    },
    # Qwen2 style: q/k/v bias, tied embeddings, MQA (2/1), default head_dim, Llama 3.1 rope
    # scaling with a short original context so every frequency band is exercised, plus a
    # document mask, a loss mask and ignored targets.
    "qwen2_tiny": {
        "config": dict(dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=0, ffn_dim=48,
                       vocab_size=128, max_seq_len=64, rope_theta=10000.0,
                       rope_scaling_factor=8.0, rope_low_freq_factor=1.0,
                       rope_high_freq_factor=4.0, rope_original_max_position=64,
                       norm_eps=1e-6, tie_embeddings=True, attention_bias=True),
        "batch": 2, "seq": 16, "seed": 5678, "loss_mask": True, "doc_ids": True,
    },
}

TRAIN = dict(steps=10, lr=3e-3, min_lr_ratio=0.1, warmup_steps=3, beta1=0.9, beta2=0.95,
             eps=1e-8, weight_decay=0.1, grad_clip=1.0)


def head_dim(cfg):
    return cfg["head_dim"] or cfg["dim"] // cfg["n_heads"]


def param_shapes(cfg):
    """Returns [(name, shape)] in anvil's layout order (Hugging Face names, Linear = (out, in))."""
    c, f, v = cfg["dim"], cfg["ffn_dim"], cfg["vocab_size"]
    q, kv = cfg["n_heads"] * head_dim(cfg), cfg["n_kv_heads"] * head_dim(cfg)
    shapes = [("model.embed_tokens.weight", (v, c))]
    for l in range(cfg["n_layers"]):
        p = f"model.layers.{l}."
        shapes += [(p + "input_layernorm.weight", (c,)),
                   (p + "self_attn.q_proj.weight", (q, c)),
                   (p + "self_attn.k_proj.weight", (kv, c)),
                   (p + "self_attn.v_proj.weight", (kv, c))]
        if cfg["attention_bias"]:
            shapes += [(p + "self_attn.q_proj.bias", (q,)),
                       (p + "self_attn.k_proj.bias", (kv,)),
                       (p + "self_attn.v_proj.bias", (kv,))]
        shapes += [(p + "self_attn.o_proj.weight", (c, q)),
                   (p + "post_attention_layernorm.weight", (c,)),
                   (p + "mlp.gate_proj.weight", (f, c)),
                   (p + "mlp.up_proj.weight", (f, c)),
                   (p + "mlp.down_proj.weight", (c, f))]
    shapes.append(("model.norm.weight", (c,)))
    if not cfg["tie_embeddings"]:
        shapes.append(("lm_head.weight", (v, c)))
    return shapes


def make_weights(cfg, generator):
    """Returns {name: tensor}: matrices ~ N(0, 0.08^2), embeddings ~ N(0, 0.5^2), norm weights
    1 + N(0, 0.1^2) and biases N(0, 0.05^2), so every term of the math is visible."""
    weights = {}
    for name, shape in param_shapes(cfg):
        noise = torch.randn(shape, generator=generator, dtype=torch.float32)
        if name.endswith("norm.weight"):
            value = 1.0 + 0.1 * noise
        elif name.endswith(".bias"):
            value = 0.05 * noise
        elif name == "model.embed_tokens.weight":
            value = 0.5 * noise
        else:
            value = 0.08 * noise
        weights[name] = value.requires_grad_(True)
    return weights


def rope_inv_freq(cfg):
    """transformers' default + "llama3" rope parameters (f32)."""
    d = head_dim(cfg)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    factor = cfg["rope_scaling_factor"]
    if factor == 0.0:
        return inv_freq
    low, high = cfg["rope_low_freq_factor"], cfg["rope_high_freq_factor"]
    old_context = cfg["rope_original_max_position"]
    low_freq_wavelen = old_context / low
    high_freq_wavelen = old_context / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, weight, eps):
    x32 = x.to(torch.float32)
    variance = x32.pow(2).mean(-1, keepdim=True)
    return weight * (x32 * torch.rsqrt(variance + eps))


def repeat_kv(x, n_rep):
    b, h, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def forward(cfg, w, tokens, doc_ids):
    """Returns logits (B, T, V) for tokens (B, T)."""
    b, t = tokens.shape
    hq, hkv, d = cfg["n_heads"], cfg["n_kv_heads"], head_dim(cfg)
    positions = torch.arange(t)[None, :].expand(b, t)
    freqs = (rope_inv_freq(cfg)[None, :, None] @ positions[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # (B, 1, T, D)
    visible = torch.tril(torch.ones(t, t, dtype=torch.bool))[None].expand(b, t, t)
    if doc_ids is not None:
        visible = visible & (doc_ids[:, :, None] == doc_ids[:, None, :])
    mask = torch.zeros(b, 1, t, t).masked_fill(~visible[:, None], float("-inf"))

    h = F.embedding(tokens, w["model.embed_tokens.weight"])
    for l in range(cfg["n_layers"]):
        p = f"model.layers.{l}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], cfg["norm_eps"])
        bias = (lambda n: w[p + f"self_attn.{n}_proj.bias"]) if cfg["attention_bias"] else (
            lambda n: None)
        q = F.linear(x, w[p + "self_attn.q_proj.weight"], bias("q"))
        k = F.linear(x, w[p + "self_attn.k_proj.weight"], bias("k"))
        v = F.linear(x, w[p + "self_attn.v_proj.weight"], bias("v"))
        q = q.view(b, t, hq, d).transpose(1, 2)
        k = k.view(b, t, hkv, d).transpose(1, 2)
        v = v.view(b, t, hkv, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, hq // hkv), repeat_kv(v, hq // hkv)
        scores = torch.matmul(q, k.transpose(2, 3)) * (d ** -0.5) + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32)
        attn = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, hq * d)
        h = h + F.linear(attn, w[p + "self_attn.o_proj.weight"])
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], cfg["norm_eps"])
        gate = F.linear(x, w[p + "mlp.gate_proj.weight"])
        up = F.linear(x, w[p + "mlp.up_proj.weight"])
        h = h + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
    h = rms_norm(h, w["model.norm.weight"], cfg["norm_eps"])
    head = w["model.embed_tokens.weight"] if cfg["tie_embeddings"] else w["lm_head.weight"]
    return F.linear(h, head)


def mean_loss(cfg, logits, targets, loss_mask):
    """Returns (mean loss, count): token losses summed over counted tokens / count."""
    losses = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1),
                             ignore_index=IGNORE_INDEX, reduction="none")
    counted = targets.reshape(-1) != IGNORE_INDEX
    if loss_mask is not None:
        losses = losses * loss_mask.reshape(-1)
        counted = counted & (loss_mask.reshape(-1) != 0)
    count = int(counted.sum())
    return losses.sum() / count, count


def schedule(step):
    """Returns the learning rate of 1-based `step`: linear warmup, then cosine to min_lr."""
    max_lr, min_lr = TRAIN["lr"], TRAIN["lr"] * TRAIN["min_lr_ratio"]
    if step <= TRAIN["warmup_steps"]:
        return max_lr * step / TRAIN["warmup_steps"]
    progress = (step - TRAIN["warmup_steps"]) / (TRAIN["steps"] - TRAIN["warmup_steps"])
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_batch(spec, generator):
    cfg, b, t = spec["config"], spec["batch"], spec["seq"]
    stream = torch.randint(0, cfg["vocab_size"], (b, t + 1), generator=generator,
                           dtype=torch.int64)
    tokens, targets = stream[:, :-1].clone(), stream[:, 1:].clone()
    loss_mask = doc_ids = None
    if spec["loss_mask"]:
        loss_mask = torch.ones(b, t)
        loss_mask[0, :3] = 0.0           # a prompt whose tokens carry no loss
        targets[1, -2:] = IGNORE_INDEX   # padding at the end of row 1
    if spec["doc_ids"]:
        doc_ids = torch.zeros(b, t, dtype=torch.int64)
        doc_ids[0, 6:] = 1
        doc_ids[1, 9:] = 1
        doc_ids[1, 13:] = 2
    return tokens, targets, loss_mask, doc_ids


def write_safetensors(path, tensors, metadata):
    """Writes {name: np.ndarray (float32 or int32)} as a safetensors file, atomically."""
    dtype_names = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    order = sorted(tensors, key=lambda n: (-tensors[n].dtype.itemsize, n))
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name in order:
        array = np.ascontiguousarray(tensors[name])
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype_names[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)
    os.replace(tmp, path)


def generate(name, spec):
    cfg = spec["config"]
    generator = torch.Generator().manual_seed(spec["seed"])
    weights = make_weights(cfg, generator)
    tokens, targets, loss_mask, doc_ids = make_batch(spec, generator)
    out = {n: p.detach().numpy().copy() for n, p in weights.items()}
    out["input.tokens"] = tokens.numpy().astype(np.int32)
    out["input.targets"] = targets.numpy().astype(np.int32)
    if loss_mask is not None:
        out["input.loss_mask"] = loss_mask.numpy().astype(np.float32)
    if doc_ids is not None:
        out["input.doc_ids"] = doc_ids.numpy().astype(np.int32)

    params = list(weights.values())
    decay = [p for n, p in weights.items() if p.dim() >= 2]
    no_decay = [p for n, p in weights.items() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": TRAIN["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=TRAIN["lr"], betas=(TRAIN["beta1"], TRAIN["beta2"]), eps=TRAIN["eps"], foreach=False)
    losses, lrs, norms = [], [], []
    for step in range(1, TRAIN["steps"] + 1):
        optimizer.zero_grad(set_to_none=True)
        logits = forward(cfg, weights, tokens, doc_ids)
        loss, count = mean_loss(cfg, logits, targets, loss_mask)
        loss.backward()
        if step == 1:
            out["output.logits"] = logits.detach().numpy().copy()
            out["output.loss"] = np.array([loss.item()], dtype=np.float32)
            for n, p in weights.items():
                out["grad." + n] = p.grad.detach().numpy().copy()
        norm = torch.nn.utils.clip_grad_norm_(params, TRAIN["grad_clip"])
        lr = float(np.float32(schedule(step)))  # what an f32 learning rate can hold
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        losses.append(loss.item())
        lrs.append(lr)
        norms.append(norm.item())
    out["train.losses"] = np.array(losses, dtype=np.float32)
    out["train.lrs"] = np.array(lrs, dtype=np.float32)
    out["train.grad_norms"] = np.array(norms, dtype=np.float32)

    metadata = {"config": json.dumps(cfg), "train": json.dumps(TRAIN),
                "loss_count": str(count), "torch": torch.__version__,
                "generator": "tools/golden/make_llama_golden.py"}
    path = os.path.normpath(os.path.join(OUT_DIR, name + ".safetensors"))
    write_safetensors(path, out, metadata)
    print(f"{path}: {os.path.getsize(path)} bytes, loss {losses[0]:.6f} -> {losses[-1]:.6f}, "
          f"grad norms {[round(n, 3) for n in norms]}")


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, spec in MODELS.items():
        generate(name, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
