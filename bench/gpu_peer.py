#!/usr/bin/env python3
"""PyTorch peer for `make gpu-check` (scripts/gpu_check.sh): the same Llama (python/llama_ref.py),
the same token shards and batch shapes, AdamW (fused on CUDA), bf16 autocast, eager or
torch.compile, on the device the check runs on, in the same run as Cadre.

  gpu_peer.py train --data DIR --model JSON --batch B --steps N --device cuda|cpu
                    [--modes eager,compiled] [--compile-backend inductor] [--out-prefix P]
  gpu_peer.py matmul --device cuda|cpu --size N      (bf16 matmul TFLOP/s: the MFU denominator)

Prints one JSON line per mode (and writes it to P.peer_<mode>.json with --out-prefix), or one
for the matmul. Both modes run in one process (one import of torch). Rates are medians over
the steps after the first two (compilation and warm-up happen there); progress goes to stderr.
The CPU rehearsal compiles with the `eager` backend (dynamo's tracing without inductor's code
generation, which takes minutes on 2 cores): the table says so.
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
from torch_peer import load_samples  # noqa: E402  (bench/, the script's own folder)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(args, device, compiled):
    torch.manual_seed(1234)
    samples, seq_len = load_samples(args.data)
    cfg = json.loads(args.model)
    model = Llama(cfg).to(device)
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = make_adamw(model, 1e-3, (0.9, 0.95), 1e-8, 0.1)
    if fused:
        opt = torch.optim.AdamW(opt.param_groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, **fused)
    forward = torch.compile(model, backend=args.compile_backend) if compiled else model
    gen = np.random.default_rng(1234)
    times, losses = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for step in range(args.steps):
        idx = gen.integers(0, len(samples), args.batch)
        batch = torch.from_numpy(samples[idx].astype(np.int64)).pin_memory() if device.type == "cuda" else \
            torch.from_numpy(samples[idx].astype(np.int64))
        batch = batch.to(device, non_blocking=True)
        synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = forward(batch[:, :-1])
        loss = loss_fn(logits, batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())  # synchronises: the step's time is complete
        times.append(time.perf_counter() - t0)
        print(f"pytorch {'compiled' if compiled else 'eager'} step {step + 1}/{args.steps}: "
              f"{args.batch * seq_len / times[-1]:.0f} tokens/s", file=sys.stderr, flush=True)
    timed = times[2:] if len(times) > 2 else times
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"tokens_per_s": statistics.median(args.batch * seq_len / t for t in timed), "final_loss": losses[-1],
            "peak_bytes": peak, "torch": torch.__version__,
            "mode": f"compiled ({args.compile_backend})" if compiled else "eager"}


def matmul(args, device):
    n = args.size
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    synchronize(device)
    reps, best = 10, float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        synchronize(device)
        best = min(best, (time.perf_counter() - t0) / reps)
    return {"tflops": 2 * n ** 3 / best / 1e12, "size": n, "torch": torch.__version__,
            "cuda": torch.version.cuda if device.type == "cuda" else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["train", "matmul"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--data")
    ap.add_argument("--model", help="model config as JSON (llama_ref keys)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--modes", default="eager,compiled", help="eager, compiled or both, comma-separated")
    ap.add_argument("--compile-backend", default="inductor")
    ap.add_argument("--out-prefix", help="also write each mode's JSON to <prefix>.peer_<mode>.json")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--size", type=int, default=8192)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_peer: --device cuda but torch sees no CUDA device")
    if args.what == "train" and not (args.data and args.model):
        sys.exit("gpu_peer train: --data and --model are required")
    if args.what == "matmul":
        print(json.dumps(matmul(args, device)))
        return
    for mode in args.modes.split(","):
        if mode not in ("eager", "compiled"):
            sys.exit(f"gpu_peer: unknown mode '{mode}' (eager or compiled)")
        result = json.dumps(train(args, device, mode == "compiled"))
        print(result, flush=True)
        if args.out_prefix:
            with open(f"{args.out_prefix}.peer_{mode}.json", "w") as f:
                f.write(result + "\n")


if __name__ == "__main__":
    main()
