"""Reads a .safetensors file Cadre wrote with the real `safetensors` package (PyPI, pinned in
python/requirements-torch.txt) and checks it against the same tensors saved as a .pt file.

Usage: safetensors_check.py <file.safetensors> <expected.pt> [<metadata key>=<value> ...]
- safe_open lists the names and each tensor's dtype and shape from the header (get_slice, which
  reads no data), and the metadata Cadre wrote (each key=value given must be there);
- safetensors.torch.load_file reads every tensor; names, dtypes, shapes and values must equal
  the .pt's bit for bit (torch.equal; NaN-free inputs);
- a slice read through get_slice of the largest tensor equals the same slice of the .pt's.
Prints "ok: ..." and exits 0, or raises naming the first difference.
"""
import sys

import safetensors
import torch
from safetensors import safe_open
from safetensors.torch import load_file

# safetensors' dtype codes, as the header spells them.
CODES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64", torch.int32: "I32"}


def main(path, expected_path, *meta):
    expected = torch.load(expected_path, weights_only=True)
    with safe_open(path, framework="pt") as f:
        names = sorted(f.keys())
        assert names == sorted(expected), f"names differ: file {names}, expected {sorted(expected)}"
        header = {}
        for name in names:
            s = f.get_slice(name)
            header[name] = (s.get_dtype(), list(s.get_shape()))
        metadata = f.metadata() or {}
        for kv in meta:
            key, value = kv.split("=", 1)
            assert metadata.get(key) == value, f"metadata {key}: {metadata.get(key)!r}, expected {value!r}"
        largest = max(names, key=lambda n: expected[n].numel())
        if expected[largest].dim() >= 1 and expected[largest].shape[0] >= 2:
            part = f.get_slice(largest)[1:2]
            assert torch.equal(part, expected[largest][1:2]), f"{largest}: slice [1:2] differs"
    loaded = load_file(path)
    for name in names:
        want = expected[name]
        dtype, shape = header[name]
        assert dtype == CODES[want.dtype], f"{name}: header dtype {dtype}, expected {CODES[want.dtype]}"
        assert shape == list(want.shape), f"{name}: header shape {shape}, expected {list(want.shape)}"
        got = loaded[name]
        assert got.dtype == want.dtype and got.shape == want.shape, f"{name}: {got.dtype} {list(got.shape)}"
        assert torch.equal(got, want), f"{name}: values differ by {(got.double() - want.double()).abs().max()}"
    dtypes = sorted({h[0] for h in header.values()})
    print(f"ok: safetensors {safetensors.__version__} read {len(names)} tensors ({', '.join(dtypes)}) "
          f"equal to the expected ones, metadata {metadata}")


if __name__ == "__main__":
    main(*sys.argv[1:])
