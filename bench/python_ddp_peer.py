#!/usr/bin/python3
"""Python PyTorch DDP over Gloo: the peer for Cadre's sharding benchmark. Same Llama
(python/llama_ref.py), same token shards, AdamW and clipping; each rank trains on its own batch.

Usage: python_ddp_peer.py --data DIR --model JSON --steps N --world 2 --precision fp32|bf16
Spawns `--world` ranks itself (torchrun fails on Python 3.11 here) with 1 thread each and prints
one JSON line from rank 0: {"tokens_per_s": global tokens / step time, median after 2 steps}.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from llama_ref import Llama, loss_fn, make_adamw  # noqa: E402
from python_peer_train import load_samples  # noqa: E402


def worker(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    samples, seq_len = load_samples(args.data)
    model = torch.nn.parallel.DistributedDataParallel(Llama(json.loads(args.model)))
    opt = make_adamw(model.module, 1e-3, (0.9, 0.95), 1e-8, 0.1)
    gen = np.random.default_rng(1234 + rank)
    times = []
    for step in range(args.steps):
        batch = torch.from_numpy(samples[gen.integers(0, len(samples), args.batch)].astype(np.int64))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(batch[:, :-1])
        loss = loss_fn(logits, batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        rate = statistics.median(world * args.batch * seq_len / t for t in times[2:])
        print(json.dumps({"tokens_per_s": rate, "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = ap.parse_args()
    if "RANK" in os.environ:
        return worker(args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
