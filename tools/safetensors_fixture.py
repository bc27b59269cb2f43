#!/usr/bin/env python3
"""Writes tests/io/fixtures/reference.safetensors with the reference safetensors library, plus
reference.json holding what anvil must read back (dtype, shape, raw bytes as hex, values).

Needs torch (for BF16, which safetensors.numpy cannot write) and safetensors. On the project's
Debian image run it with the system interpreter, which has python3-torch:
    /usr/bin/python3 -m pip install --break-system-packages safetensors
    /usr/bin/python3 tools/safetensors_fixture.py
The output is deterministic: no random values, one metadata key (the reference writer orders
metadata keys by hash, so more than one key would make the bytes vary between runs).
"""
import json
import pathlib

import safetensors
import safetensors.torch
import torch

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "io" / "fixtures"


def tensors():
    return {
        "model.embed_tokens.weight": torch.tensor(
            [[0.5, -1.25, 3.0, 1e-3], [65504.0, -0.0, 2.5e-8, 7.0], [1.0, 2.0, 3.0, 4.0]],
            dtype=torch.float32),
        "model.norm.weight": torch.tensor([1.0, -2.5, 0.00390625, 3.140625], dtype=torch.bfloat16),
        "half": torch.tensor([[0.5, -1.0, 65504.0], [6.1e-5, 1e-7, -0.0]], dtype=torch.float16),
        "double": torch.tensor([1.0 / 3.0, -2.0], dtype=torch.float64),
        "ids": torch.tensor([0, -1, 2147483647, -2147483648, 42], dtype=torch.int32),
        "big_ids": torch.tensor([9007199254740993, -5], dtype=torch.int64),
        "short": torch.tensor([-32768, 7, 32767], dtype=torch.int16),
        "tiny": torch.tensor([-128, 127], dtype=torch.int8),
        "bytes": torch.tensor([0, 128, 255], dtype=torch.uint8),
        "flags": torch.tensor([True, False, True, True], dtype=torch.bool),
        "scalar": torch.tensor(2.75, dtype=torch.float32),
        "empty": torch.zeros((0, 3), dtype=torch.float32),
        'layer."quoted"/\u00e9': torch.tensor([1.5], dtype=torch.float32),
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    data = tensors()
    metadata = {"format": "pt"}
    path = OUT / "reference.safetensors"
    safetensors.torch.save_file(data, str(path), metadata=metadata)
    expected = {
        "generator": f"safetensors {safetensors.__version__}, torch {torch.__version__}",
        "file_size": path.stat().st_size,
        "metadata": metadata,
        "tensors": {},
    }
    dtype_names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
                   torch.float64: "F64", torch.int32: "I32", torch.int64: "I64",
                   torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
    for name, tensor in data.items():
        values = tensor.reshape(-1)
        if tensor.is_floating_point():
            values = values.double().tolist()  # exact: every f16/bf16/f32 value is a double
        else:
            values = [int(v) for v in values.tolist()]
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        expected["tensors"][name] = {
            "dtype": dtype_names[tensor.dtype],
            "shape": list(tensor.shape),
            "hex": raw.hex(),
            "values": values,
        }
    (OUT / "reference.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({expected['file_size']} bytes) and reference.json")


if __name__ == "__main__":
    main()
