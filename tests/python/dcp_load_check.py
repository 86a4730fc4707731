"""Loads Cadre's DCP export with PyTorch's own distributed-checkpoint reader, without Cadre's code.

Usage: dcp_load_check.py <dcp_dir> <model.pt>
- reads <dcp_dir>/.metadata (a pickle of DCP's Metadata) and checks every tensor's chunks tile it,
- loads every tensor into a zero-filled state dict with load_state_dict(..., FileSystemReader)
  (torch 1.13: torch.distributed._shard.checkpoint; no process group: no_dist=True),
- loads one tensor as a ShardedTensor-free slice: a state dict holding only the first tensor,
- compares everything with the .pt export of the same checkpoint, bit for bit.
Prints "ok: ..." and exits 0, or names the first difference and exits 1.
"""
import dataclasses
import math
import sys

import torch


def import_dcp():
    """torch.distributed._shard.checkpoint of Debian's torch 1.13, on Python 3.11.

    torch 1.13's sharded_tensor/metadata.py gives a dataclass field the default
    TensorProperties(), an unhashable dataclass instance, which Python 3.11 refuses ("mutable
    default ... use default_factory"), so the package cannot be imported at all (torch 2.0 fixed
    it with default_factory). Making TensorProperties hashable while that module is imported lets
    it load; nothing in the checkpoint reader depends on it.
    """
    original = dataclasses.dataclass

    def dataclass(cls=None, **kwargs):
        def wrap(c):
            if c.__name__ == "TensorProperties" and c.__module__.startswith("torch.distributed._shard"):
                kwargs.setdefault("unsafe_hash", True)
            return original(c, **kwargs)
        return wrap if cls is None else wrap(cls)

    dataclasses.dataclass = dataclass
    try:
        import torch.distributed._shard.checkpoint as dcp
    finally:
        dataclasses.dataclass = original
    return dcp


dcp = import_dcp()


def main():
    dcp_dir, pt = sys.argv[1], sys.argv[2]
    expected = torch.load(pt)
    metadata = dcp.FileSystemReader(dcp_dir).read_metadata()
    chunks = 0
    for name, md in metadata.state_dict_metadata.items():
        volume = sum(math.prod(c.sizes) for c in md.chunks)
        if volume != math.prod(md.size) or list(md.size) != list(expected[name].shape):
            print(f"{name}: chunks cover {volume} of {list(md.size)}; the .pt export has {list(expected[name].shape)}")
            return 1
        chunks += len(md.chunks)
    if set(metadata.state_dict_metadata) != set(expected):
        print(f"names differ: {sorted(set(metadata.state_dict_metadata) ^ set(expected))}")
        return 1
    state = {name: torch.zeros_like(t) for name, t in expected.items()}
    dcp.load_state_dict(state, dcp.FileSystemReader(dcp_dir), no_dist=True)
    for name, t in expected.items():
        if not torch.equal(state[name], t):
            print(f"{name}: DCP load differs from the .pt export by {(state[name] - t).abs().max().item()}")
            return 1
    first = sorted(expected)[0]
    one = {first: torch.zeros_like(expected[first])}
    dcp.load_state_dict(one, dcp.FileSystemReader(dcp_dir), no_dist=True)
    if not torch.equal(one[first], expected[first]):
        print(f"{first}: loading it alone differs")
        return 1
    print(f"ok: {len(expected)} tensors in {chunks} chunks loaded by torch {torch.__version__} "
          f"torch.distributed._shard.checkpoint, equal to the .pt export")
    return 0


if __name__ == "__main__":
    sys.exit(main())
