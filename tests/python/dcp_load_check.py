"""Loads Cadre's DCP export (`cadre ckpt export --format dcp`) with PyTorch 2.x's own
torch.distributed.checkpoint (the project venv's torch, pinned in
python/requirements-torch.txt), without Cadre's code.

Usage: dcp_load_check.py <dcp_dir> <model.pt>
- FileSystemReader reads <dcp_dir>/.metadata (a pickle of DCP's Metadata); every tensor's
  chunks must tile it (their volumes add up to its size and none reaches outside it), and the
  names, sizes and dtypes must be the .pt export's;
- torch.distributed.checkpoint.load fills a zero-filled state dict of every tensor (no process
  group: the single-process path), then a state dict holding only one tensor;
- format_utils.dcp_to_torch_save converts the folder to a torch.save file without a template;
- everything must equal the .pt export of the same checkpoint, bit for bit.
Prints "ok: ..." and exits 0, or names the first difference and exits 1.
"""
import math
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

# dcp.load without an initialised process group says it assumes a single process: that is the point.
warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process.*")


def main():
    dcp_dir, pt = sys.argv[1], sys.argv[2]
    expected = torch.load(pt, weights_only=True)
    metadata = dcp.FileSystemReader(dcp_dir).read_metadata()
    if set(metadata.state_dict_metadata) != set(expected):
        print(f"names differ: {sorted(set(metadata.state_dict_metadata) ^ set(expected))}")
        return 1
    chunks = split = 0
    for name, md in metadata.state_dict_metadata.items():
        want = expected[name]
        volume = sum(math.prod(c.sizes) for c in md.chunks)
        inside = all(o + s <= d for c in md.chunks for o, s, d in zip(c.offsets, c.sizes, md.size))
        if volume != math.prod(md.size) or not inside or list(md.size) != list(want.shape):
            print(f"{name}: chunks cover {volume} of {list(md.size)} (inside: {inside}); "
                  f"the .pt export has {list(want.shape)}")
            return 1
        if md.properties.dtype != want.dtype:
            print(f"{name}: DCP says {md.properties.dtype}, the .pt export has {want.dtype}")
            return 1
        chunks += len(md.chunks)
        split += len(md.chunks) > 1
    state = {name: torch.zeros_like(t) for name, t in expected.items()}
    dcp.load(state, checkpoint_id=dcp_dir)
    for name, t in expected.items():
        if not torch.equal(state[name], t):
            print(f"{name}: DCP load differs from the .pt export by {(state[name] - t).abs().max().item()}")
            return 1
    first = sorted(expected)[0]
    one = {first: torch.zeros_like(expected[first])}
    dcp.load(one, checkpoint_id=dcp_dir)
    if not torch.equal(one[first], expected[first]):
        print(f"{first}: loading it alone differs")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        converted_path = os.path.join(tmp, "converted.pt")
        dcp_to_torch_save(dcp_dir, converted_path)
        converted = torch.load(converted_path, weights_only=True)
    if sorted(converted) != sorted(expected) or any(not torch.equal(converted[n], expected[n]) for n in expected):
        print("dcp_to_torch_save's state dict differs from the .pt export")
        return 1
    print(f"ok: {len(expected)} tensors in {chunks} chunks ({split} tensors split) loaded by torch {torch.__version__} "
          f"torch.distributed.checkpoint (load, and dcp_to_torch_save), equal to the .pt export")
    return 0


if __name__ == "__main__":
    sys.exit(main())
