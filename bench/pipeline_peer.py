#!/usr/bin/env python3
"""PyTorch peer for bench/pipeline_bubble.py: the same Llama (python/llama_ref.py) split into the
same stages as Cadre splits it, trained with torch.distributed.pipelining (PipelineStage and
ScheduleGPipe / Schedule1F1B / ScheduleInterleaved1F1B with --chunks virtual stages per rank)
over Gloo, one rank per stage, as a PyTorch 2.x user runs a
pipeline: the step's batch in --micro micro-batches, mean loss per micro-batch (scale_grads),
the global gradient norm clipped across the stages (each stage's sum of squares all-reduced over
the pipeline, as torchtitan's clip_grad_norm_ does with a pp mesh), AdamW(fused=True) per stage.
float32 on both sides: the pipelining API has no mixed-precision policy of its own.

Prints one JSON line (rank 0): tokens_per_s (the step's tokens / step time, median after
--warmup steps, step start to next step start), final_loss (the last stage's, sent to rank 0),
torch.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from llama_ref import Llama, loss_fn  # noqa: E402
from torch_peer import load_samples, spawn, worker  # noqa: E402 (torchrun's job, done in-script)


class Stage(nn.Module):
    """Blocks [begin, end) of `full`, with the embedding on the first stage and the norm and head
    on the last (torchtitan's manual split: the model with the other stages' parts deleted)."""

    def __init__(self, full, begin, end, first, last):
        super().__init__()
        self.tok_embeddings = full.tok_embeddings if first else None
        self.layers = nn.ModuleList([full.layers[i] for i in range(begin, end)])
        self.norm = full.norm if last else None
        self.output = full.output if last else None
        self.register_buffer("cos", full.cos, persistent=False)
        self.register_buffer("sin", full.sin, persistent=False)

    def forward(self, x):
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        T = h.shape[1]
        cos, sin = self.cos[:T].to(h.dtype), self.sin[:T].to(h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        if self.norm is None:
            return h
        return F.linear(self.norm(h), self.output.weight)


def clip_global(params, max_norm, group):
    """torch.nn.utils.clip_grad_norm_ over every stage's parameters."""
    grads = [p.grad for p in params if p.grad is not None]
    sq = torch.stack(torch._foreach_norm(grads)).pow(2).sum()
    dist.all_reduce(sq, group=group)
    total = sq.sqrt()
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total.item()


def train(args, rank, world):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    samples, seq_len = load_samples(args.data)
    cfg = dict(json.loads(args.model), attention="sdpa")
    bounds = [int(b) for b in args.bounds.split(",")]
    full = Llama(cfg)
    # Virtual stage g = chunk * world + rank (Megatron's and torch's interleaved placement).
    virtual = world * args.chunks
    ids = [chunk * world + rank for chunk in range(args.chunks)]
    modules = [Stage(full, bounds[g], bounds[g + 1], g == 0, g == virtual - 1) for g in ids]
    del full
    stages = [PipelineStage(m, g, virtual, torch.device("cpu")) for m, g in zip(modules, ids)]
    if args.schedule == "interleaved":
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=args.micro, loss_fn=loss_fn)
    else:
        kind = Schedule1F1B if args.schedule == "1f1b" else ScheduleGPipe
        schedule = kind(stages[0], n_microbatches=args.micro, loss_fn=loss_fn)
    params = [p for m in modules for p in m.parameters()]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
    gen = np.random.default_rng(1234)  # every stage draws the same batch: the first its inputs, the last its targets
    starts, losses = [], []
    for step in range(args.steps):
        batch = torch.from_numpy(samples[gen.integers(0, len(samples), args.batch)].astype(np.int64))
        starts.append(time.perf_counter())
        opt.zero_grad(set_to_none=True)
        micro_losses = []
        if rank == 0:
            schedule.step(batch[:, :-1].contiguous())
        elif rank == world - 1:
            schedule.step(target=batch[:, 1:].contiguous(), losses=micro_losses)
        else:
            schedule.step()
        clip_global(params, 1.0, None)
        opt.step()
        loss = torch.tensor([sum(l.item() for l in micro_losses) / args.micro if micro_losses else 0.0])
        dist.all_reduce(loss)  # the last stage's loss, to rank 0
        losses.append(loss.item())
        if rank == 0 and step > 0:
            print(f"torch pipelining {args.schedule} step {step}/{args.steps}: "
                  f"{args.batch * seq_len / (starts[-1] - starts[-2]):.0f} tok/s", file=sys.stderr, flush=True)
    dist.barrier()
    starts.append(time.perf_counter())
    times = [b - a for a, b in zip(starts, starts[1:])]
    rate = statistics.median(args.batch * seq_len / t for t in times[args.warmup:])
    return dict(tokens_per_s=rate, final_loss=losses[-1], torch=torch.__version__)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True, help="model config as JSON")
    ap.add_argument("--bounds", required=True, help="stage boundaries in blocks, e.g. 0,4,8 (Cadre's split)")
    ap.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"], default="1f1b")
    ap.add_argument("--chunks", type=int, default=1, help="virtual stages per rank (interleaved: >= 2)")
    ap.add_argument("--world", type=int, default=2, help="stages (one rank each)")
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--micro", type=int, default=8, help="micro-batches per step")
    args = ap.parse_args()
    if args.warmup >= args.steps:
        ap.error(f"--warmup {args.warmup} leaves no step of --steps {args.steps} to time")
    if (args.chunks > 1) != (args.schedule == "interleaved"):
        ap.error(f"--chunks {args.chunks} with --schedule {args.schedule}: only interleaved runs several chunks")
    if len(args.bounds.split(",")) != args.world * args.chunks + 1:
        ap.error(f"--bounds needs {args.world * args.chunks + 1} numbers for {args.world} x {args.chunks} stages")
    return worker(args, train) if "RANK" in os.environ else spawn(args)


if __name__ == "__main__":
    sys.exit(main())
