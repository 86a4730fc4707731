#!/usr/bin/python3
"""Python PyTorch peer for the training benchmark: the same Llama (python/llama_ref.py), the
same token shards, AdamW with the same settings and clipping, on the same machine.

Usage: python_peer_train.py --data DIR --model JSON --steps N --threads T --precision fp32|bf16
Prints one JSON line: {"tokens_per_s": median over steps after the first two, ...}.
bf16 uses torch.autocast (what a PyTorch user writes); fp32 is plain.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from llama_ref import Llama, loss_fn, make_adamw  # noqa: E402


def load_samples(data_dir):
    manifest = json.load(open(os.path.join(data_dir, "manifest.json")))
    per = manifest["seq_len"] + 1
    dtype = np.uint16 if manifest["token_bytes"] == 2 else np.uint32
    arrays = [np.memmap(os.path.join(data_dir, s["file"]), dtype=dtype, mode="r", offset=64).reshape(-1, per)
              for s in manifest["train"]]
    return np.concatenate(arrays), manifest["seq_len"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True, help="model config as JSON")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    samples, seq_len = load_samples(args.data)
    model = Llama(json.loads(args.model))
    opt = make_adamw(model, 1e-3, (0.9, 0.95), 1e-8, 0.1)
    gen = np.random.default_rng(1234)
    times, losses = [], []
    for step in range(args.steps):
        idx = gen.integers(0, len(samples), args.batch)
        batch = torch.from_numpy(samples[idx].astype(np.int64))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(batch[:, :-1])
        loss = loss_fn(logits, batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        print(f"python peer {args.precision} step {step + 1}/{args.steps}: {args.batch * seq_len / times[-1]:.0f} tok/s",
              file=sys.stderr, flush=True)
    rate = statistics.median(args.batch * seq_len / t for t in times[2:])
    print(json.dumps({"tokens_per_s": rate, "final_loss": losses[-1], "torch": torch.__version__}))


if __name__ == "__main__":
    main()
