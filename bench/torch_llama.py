#!/usr/bin/env python3
"""A plain-PyTorch Llama trainer that computes what `anvil train --data.synthetic=true` computes.

Used by bench/cpu_compare.py (throughput against anvil on the same configuration and thread
count) and bench/verify_parity.py (same weights and batches give the same losses). Math and
names follow Hugging Face's LlamaForCausalLM: RMSNorm, rotate-half RoPE, grouped-query
attention, SwiGLU MLP, optional tied lm_head. Training matches anvil's trainer: synthetic
tokens from the same counter-based hash (data/synthetic.h), mean cross-entropy over the
global batch, global-norm clipping, torch.optim.AdamW with decay on matrices only (not the
embedding unless asked), and the same warmup + cosine/linear/constant/wsd schedule
(optim/lr_schedule.cpp). bf16 runs use torch.autocast on fp32 master weights; norms,
softmax and the loss stay in fp32, and the logits are bf16 as autocast makes them (HF's
behaviour) unless --f32-head.

Works with torch 1.13 (explicit causal softmax attention) and 2.x (scaled_dot_product_attention).
The last stdout line is a JSON summary with the keys of anvil's --logging.json summary.
"""

import argparse
import json
import math
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# Steps left out of the steady-state throughput, as anvil's trainer (kThroughputWarmupSteps).
WARMUP_STEPS_EXCLUDED = 2
INIT_STD = 0.02
MASK64 = (1 << 64) - 1


# ----------------------------------------------------------------------------- configuration


def flops_per_token(cfg, seq_len):
    """Returns training FLOPs per token as LlamaConfig::flops_per_token (llama_config.cpp)."""
    head_dim = cfg.dim // cfg.n_heads
    q_dim = cfg.n_heads * head_dim
    kv_dim = cfg.n_kv_heads * head_dim
    per_layer = cfg.dim * q_dim + 2 * cfg.dim * kv_dim + q_dim * cfg.dim + 3 * cfg.dim * cfg.ffn_dim
    matmul_params = cfg.n_layers * per_layer + cfg.vocab_size * cfg.dim
    return 6.0 * matmul_params + 12.0 * cfg.n_layers * seq_len * q_dim


def lr_at(step, cfg):
    """Returns the learning rate of 1-based update `step` as LrSchedule::lr_at."""
    total = max(cfg.steps, 1)
    step = min(max(step, 1), total)
    if step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    decay_start = max(cfg.warmup_steps, 0)

    def progress(start, end):
        return 1.0 if end <= start else min(max((step - start) / (end - start), 0.0), 1.0)

    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "linear":
        return cfg.lr + (cfg.min_lr - cfg.lr) * progress(decay_start, total)
    if cfg.schedule == "cosine":
        p = progress(decay_start, total)
        return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * p)) * (cfg.lr - cfg.min_lr)
    if cfg.schedule == "wsd":
        # llround: halves away from zero.
        decay_steps = int(math.floor(cfg.wsd_decay_fraction * total + 0.5))
        stable_end = max(decay_start, total - decay_steps)
        if step <= stable_end:
            return cfg.lr
        return cfg.lr + (cfg.min_lr - cfg.lr) * progress(stable_end, total)
    raise ValueError(f"unknown schedule {cfg.schedule!r}")


# ------------------------------------------------------------------------------ synthetic data


def _mix64(x):
    """splitmix64 finaliser on a uint64 numpy array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def synthetic_tokens(seed, first_sample, count, seq_len, vocab_size):
    """Returns (inputs, targets) int64 (count, seq_len) as SyntheticData::fill in anvil."""
    with np.errstate(over="ignore"):
        seed_mix = _mix64(np.array([seed & MASK64], dtype=np.uint64))
        samples = np.arange(first_sample, first_sample + count, dtype=np.uint64)[:, None]
        positions = np.arange(seq_len + 1, dtype=np.uint64)[None, :]
        pair = _mix64(seed_mix ^ samples)  # hash_pair(seed, sample)
        h = _mix64(pair ^ positions)  # hash_triple(seed, sample, position)
        # High 64 bits of the 128-bit product h * vocab (vocab < 2^32).
        vocab = np.uint64(vocab_size)
        hi = (h >> np.uint64(32)) * vocab
        lo = ((h & np.uint64(0xFFFFFFFF)) * vocab) >> np.uint64(32)
        tokens = ((hi + lo) >> np.uint64(32)).astype(np.int64)
    tokens = torch.from_numpy(tokens)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


# --------------------------------------------------------------------------------- the model


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed


def rope_tables(seq_len, head_dim, theta):
    """Returns (cos, sin) (seq_len, head_dim) in fp32, HF's rotate-half layout."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, groups):
    """(B, Hkv, T, D) -> (B, Hkv * groups, T, D); query head h reads kv head h // groups."""
    if groups == 1:
        return x
    b, h, t, d = x.shape
    return x[:, :, None, :, :].expand(b, h, groups, t, d).reshape(b, h * groups, t, d)


HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def causal_attention(q, k, v):
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.float().masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.q_proj = nn.Linear(cfg.dim, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rope(q, cos, sin).to(v.dtype)
        k = apply_rope(k, cos, sin).to(v.dtype)
        groups = self.n_heads // self.n_kv_heads
        out = causal_attention(q, repeat_kv(k, groups), repeat_kv(v, groups))
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)


class LlamaForCausalLM(nn.Module):
    """Parameter names are exactly the Hugging Face ones (model.layers.N..., lm_head.weight)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaBody(cfg)
        self.tied = cfg.tie_embeddings
        if not self.tied:
            self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.seq_len, cfg.dim // cfg.n_heads, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def head_weight(self):
        return self.model.embed_tokens.weight if self.tied else self.lm_head.weight

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            if self.cfg.activation_checkpointing:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        if self.cfg.f32_head:
            with torch.autocast("cpu", enabled=False):
                logits = F.linear(self.model.norm(x).float(), self.head_weight())
        else:
            logits = F.linear(self.model.norm(x), self.head_weight())
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1),
                               reduction="sum")

    def init_weights(self, seed):
        """Fills weights as anvil's init_llama_weights (same distributions, torch's RNG)."""
        gen = torch.Generator().manual_seed(seed)
        residual_scale = 1.0 / math.sqrt(2.0 * self.cfg.n_layers)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    residual = name.endswith("o_proj.weight") or name.endswith("down_proj.weight")
                    p.normal_(0.0, INIT_STD * (residual_scale if residual else 1.0), generator=gen)


# ------------------------------------------------------------------------------- safetensors


_ST_DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "F16": (np.float16, 2)}


def save_safetensors(model, path):
    """Writes every parameter as F32 under its HF name (the tied lm_head is not written)."""
    tensors = {name: p.detach().float().contiguous().numpy() for name, p in model.named_parameters()}
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for array in tensors.values():
            f.write(array.astype("<f4").tobytes())


def load_safetensors(model, path):
    """Reads every parameter of `model` from an HF-named safetensors file (F32/BF16/F16)."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    base = 8 + header_len
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name not in header:
                raise SystemExit(f"torch_llama: {path}: tensor {name} missing")
            entry = header[name]
            np_dtype, _ = _ST_DTYPES[entry["dtype"]]
            start, end = entry["data_offsets"]
            array = np.frombuffer(blob[base + start:base + end], dtype=np_dtype)
            if entry["dtype"] == "BF16":
                array = (array.astype(np.uint32) << 16).view(np.float32)
            array = array.astype(np.float32).reshape(entry["shape"])
            if list(array.shape) != list(p.shape):
                raise SystemExit(f"torch_llama: {path}: {name} has shape {array.shape}, "
                                 f"expected {tuple(p.shape)}")
            p.copy_(torch.from_numpy(array.copy()))


# ---------------------------------------------------------------------------------- training


def torch_version_tuple():
    """Returns (major, minor) of the running torch."""
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def make_optimizer(model, cfg):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_matrix = p.dim() == 2
        is_embedding = name == "model.embed_tokens.weight"
        (decay if is_matrix and (not is_embedding or cfg.decay_embeddings) else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    impl = cfg.adamw_impl
    if impl == "auto":
        impl = "fused" if torch_version_tuple() >= (2, 4) else "foreach"
    if impl == "fused":
        kwargs["fused"] = True
    elif impl == "foreach":
        kwargs["foreach"] = True
    elif impl == "loop":
        kwargs["foreach"] = False
    try:
        return torch.optim.AdamW(groups, **kwargs), impl
    except (TypeError, RuntimeError):
        kwargs.pop("fused", None)
        kwargs["foreach"] = True
        return torch.optim.AdamW(groups, **kwargs), "foreach"


def train(cfg):
    torch.set_num_threads(cfg.threads)
    model = LlamaForCausalLM(cfg)
    if cfg.init_from:
        load_safetensors(model, cfg.init_from)
    else:
        model.init_weights(cfg.seed)
    if cfg.save_init:
        save_safetensors(model, cfg.save_init)
    optimizer, adamw_impl = make_optimizer(model, cfg)
    params = [p for p in model.parameters()]
    rows = cfg.batch_size * cfg.grad_accum
    tokens_per_step = rows * cfg.seq_len
    use_bf16 = cfg.dtype == "bf16"

    losses, step_seconds, grad_norms = [], [], []
    for step in range(1, cfg.steps + 1):
        begin = time.perf_counter()
        inputs, targets = synthetic_tokens(cfg.seed, (step - 1) * rows, rows, cfg.seq_len,
                                           cfg.vocab_size)
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for m in range(cfg.grad_accum):
            rows_m = slice(m * cfg.batch_size, (m + 1) * cfg.batch_size)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
                loss = model(inputs[rows_m], targets[rows_m])
            (loss / tokens_per_step).backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else
                                              float("inf"))
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        optimizer.step()
        step_seconds.append(time.perf_counter() - begin)
        losses.append(loss_sum / tokens_per_step)
        grad_norms.append(float(norm))
        if cfg.verbose:
            print(f"step {step}/{cfg.steps} loss {losses[-1]:.6f} grad_norm {grad_norms[-1]:.4f} "
                  f"{tokens_per_step / step_seconds[-1]:.0f} tok/s", file=sys.stderr, flush=True)

    steady = step_seconds[WARMUP_STEPS_EXCLUDED:] or step_seconds
    tokens_per_s = tokens_per_step * len(steady) / sum(steady)
    fpt = flops_per_token(cfg, cfg.seq_len)
    return {
        "steps": cfg.steps,
        "tokens": tokens_per_step * cfg.steps,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": fpt,
        "gflops_per_s": tokens_per_s * fpt / 1e9,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "final_loss": losses[-1],
        "losses": losses,
        "grad_norms": grad_norms,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "attention": "sdpa" if HAVE_SDPA else "explicit",
        "adamw": adamw_impl,
    }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--dim", type=int, default=512)
    a("--n-layers", type=int, default=8)
    a("--n-heads", type=int, default=8)
    a("--n-kv-heads", type=int, default=4)
    a("--ffn-dim", type=int, default=1408)
    a("--vocab-size", type=int, default=8192)
    a("--rope-theta", type=float, default=10000.0)
    a("--norm-eps", type=float, default=1e-5)
    a("--tie-embeddings", action="store_true")
    a("--steps", type=int, default=10)
    a("--batch-size", type=int, default=8)
    a("--seq-len", type=int, default=256)
    a("--grad-accum", type=int, default=1)
    a("--dtype", choices=["f32", "bf16"], default="f32")
    a("--activation-checkpointing", action="store_true")
    a("--f32-head", action="store_true",
      help="bf16: run the lm_head GEMM in f32 (anvil keeps logits f32; autocast rounds them to "
           "bf16, which changes the training trajectory after a few steps)")
    a("--seed", type=int, default=1337, help="data seed (anvil's training.seed) and init seed")
    a("--lr", type=float, default=2e-3)
    a("--min-lr", type=float, default=2e-4)
    a("--schedule", choices=["cosine", "linear", "constant", "wsd"], default="cosine")
    a("--warmup-steps", type=int, default=30)
    a("--wsd-decay-fraction", type=float, default=0.2)
    a("--weight-decay", type=float, default=0.1)
    a("--beta1", type=float, default=0.9)
    a("--beta2", type=float, default=0.95)
    a("--eps", type=float, default=1e-8)
    a("--grad-clip", type=float, default=1.0)
    a("--decay-embeddings", action="store_true")
    a("--adamw-impl", choices=["auto", "fused", "foreach", "loop"], default="auto")
    a("--threads", type=int, default=2)
    a("--init-from", default="", help="HF-named safetensors to load instead of random init")
    a("--save-init", default="", help="write the initial weights here (HF names, F32)")
    a("--verbose", action="store_true", help="a progress line per step on stderr")
    cfg = p.parse_args(argv)
    if cfg.n_heads % cfg.n_kv_heads or cfg.dim % cfg.n_heads:
        p.error("n_heads must divide dim and be a multiple of n_kv_heads")
    return cfg


def main():
    cfg = parse_args()
    print(json.dumps(train(cfg)), flush=True)


if __name__ == "__main__":
    main()
