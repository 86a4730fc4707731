#!/usr/bin/env python3
"""PyTorch peer for Cadre's training benchmarks: the same Llama (python/llama_ref.py), the same
token shards, AdamW with the same settings and clipping, run the way a PyTorch 2.x user would.

  --mode single   one process, eager (or --compile: torch.compile, for reference)
  --mode ddp      DistributedDataParallel over Gloo, --world ranks spawned here
  --mode fsdp2    torch.distributed.fsdp.fully_shard (FSDP2) per block and at the root, Gloo
                  (--world 1: one process under FSDP2's mixed precision, as a careful user runs
                  bf16 on one rank)
  --mode hsdp     fully_shard over a (replicate=world, shard=1) mesh: DDP's layout (every rank
                  the whole model, gradients all-reduced) under FSDP2's mixed precision

Precision: fp32, or bf16: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) for FSDP2
and HSDP (Cadre's bf16 setting: bf16 compute parameters over float32 masters, fp32 reduction);
torch.autocast for single and DDP (fp32 parameters, float32 residual stream, norms and RoPE,
casts before every linear: another dtype policy, shown as a labelled reference row).
--attention sdpa uses F.scaled_dot_product_attention; --ac checkpoints every block's activations.
--lora R: PEFT's LoRA (rank R, alpha 2R, no dropout) on every projection (PEFT's all-linear),
the base frozen, as a PEFT + FSDP2 user fine-tunes; --fused: AdamW(fused=True); --meta: the model
built on the meta device and materialised after sharding (each rank allocates its shards only,
as FSDP2's documentation does for large models), its values drawn locally (values do not change
the speed or memory measured).

Prints one JSON line (rank 0): tokens_per_s (global tokens / step time, median after --warmup
steps), final_loss, peak_rss_bytes (rank 0's high-water mark, as Cadre's summary.json),
baseline_rss_bytes (rank 0's RSS before the model: torch imported, the process group up), torch.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from llama_ref import Llama, loss_fn, make_adamw  # noqa: E402


def load_samples(data_dir):
    manifest = json.load(open(os.path.join(data_dir, "manifest.json")))
    per = manifest["seq_len"] + 1
    dtype = np.uint16 if manifest["token_bytes"] == 2 else np.uint32
    arrays = [np.memmap(os.path.join(data_dir, s["file"]), dtype=dtype, mode="r", offset=64).reshape(-1, per)
              for s in manifest["train"]]
    return np.concatenate(arrays), manifest["seq_len"]


def checkpoint_blocks(model):
    """Recompute each block's activations in backward (non-reentrant, as torchtitan does)."""
    for layer in model.layers:
        layer.forward = (lambda f: lambda *a: checkpoint(f, *a, use_reentrant=False))(layer.forward)


def add_lora(model, rank):
    """PEFT's LoRA on every projection; returns the Llama inside (what FSDP2 wraps and runs)."""
    from peft import LoraConfig, get_peft_model
    targets = ["wq", "wk", "wv", "wo", "w1", "w2", "w3"]
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                  target_modules=targets, bias="none"))
    return peft_model.base_model.model


def materialise(model, cfg):
    """After fully_shard on the meta device: storage for this rank's shards, values drawn locally."""
    model.to_empty(device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if name.endswith("norm.weight"):
                local.fill_(1.0)
            elif "lora_B" in name:
                local.zero_()
            else:
                local.normal_(0.0, 0.02)
        hd = cfg["dim"] // cfg["n_heads"]  # the rotary tables (buffers, not sharded): as llama_ref makes them
        inv = cfg["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(cfg["max_seq_len"], dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        model.cos.copy_(ang.cos().float())
        model.sin.copy_(ang.sin().float())


def make_optimizer(model, args):
    if args.lora == 0 and not args.fused:
        return make_adamw(model, 1e-3, (0.9, 0.95), 1e-8, 0.1)
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.dim() >= 2]
    no_decay = [p for p in trainable if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=args.fused or None)


def wrap(model, args, world):
    if args.mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    if args.mode in ("fsdp2", "hsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh("cpu", (world,)) if args.mode == "fsdp2" else \
            init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if args.precision == "bf16" else MixedPrecisionPolicy()
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        return model
    return torch.compile(model) if args.compile else model


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def train(args, rank, world):
    baseline = rss_bytes()  # libraries loaded and the process group up, before the model
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    samples, seq_len = load_samples(args.data)
    cfg = dict(json.loads(args.model), attention=args.attention)
    with torch.device("meta" if args.meta else "cpu"):
        model = Llama(cfg)
    if args.lora:
        model = add_lora(model, args.lora)
        if args.base_dtype == "bf16":  # the frozen base stored as it computes; the adapters stay float32
            for p in model.parameters():
                if not p.requires_grad:
                    p.data = p.data.to(torch.bfloat16)
    if args.ac:
        checkpoint_blocks(model)
    model = wrap(model, args, world)
    if args.meta:
        materialise(model, cfg)
    opt = make_optimizer(model, args)  # after wrapping: FSDP2 registers new (DTensor) parameters
    autocast = args.precision == "bf16" and args.mode in ("single", "ddp")
    gen = np.random.default_rng(1234 + rank)
    times, losses = [], []
    for step in range(args.steps):
        batch = torch.from_numpy(samples[gen.integers(0, len(samples), args.batch)].astype(np.int64))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(batch[:, :-1])
        loss = loss_fn(logits, batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"torch peer {args.mode} {args.precision} step {step + 1}/{args.steps}: "
                  f"{world * args.batch * seq_len / times[-1]:.0f} tok/s", file=sys.stderr, flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # VmHWM, as Cadre's summary reports
    rate = statistics.median(world * args.batch * seq_len / t for t in times[args.warmup:])
    return dict(tokens_per_s=rate, final_loss=losses[-1], peak_rss_bytes=rss, baseline_rss_bytes=baseline,
                torch=torch.__version__)


def worker(args, train_fn=None):
    """One rank of a job spawn() started: `train_fn` (default: this peer's train) over Gloo."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = (train_fn or train)(args, rank, world)
    if rank == 0:
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()


def spawn(args):
    """torchrun's job, done here so the peer needs nothing but this script."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS=str(args.threads))
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    return max(p.wait() for p in procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True, help="model config as JSON")
    ap.add_argument("--mode", choices=["single", "ddp", "fsdp2", "hsdp"], default="single")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="threads per process")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--attention", choices=["sdpa", "math"], default="sdpa")
    ap.add_argument("--ac", action="store_true", help="activation checkpointing per block")
    ap.add_argument("--compile", action="store_true", help="torch.compile (single only)")
    ap.add_argument("--lora", type=int, default=0, help="PEFT LoRA rank on every projection (0: full training)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    ap.add_argument("--meta", action="store_true", help="build on the meta device, materialise after sharding")
    ap.add_argument("--base-dtype", choices=["fp32", "bf16"], default="fp32",
                    help="--lora: the frozen base's storage dtype (bf16: as a careful user loads it for bf16 compute)")
    args = ap.parse_args()
    if args.warmup >= args.steps:
        ap.error(f"--warmup {args.warmup} leaves no step of --steps {args.steps} to time")
    if args.compile and args.mode != "single":
        ap.error("--compile is for --mode single")
    if args.meta and args.mode not in ("fsdp2", "hsdp"):
        ap.error("--meta is for --mode fsdp2 (the model is materialised after sharding)")
    if args.mode == "single":
        print(json.dumps(train(args, 0, 1)), flush=True)
        return 0
    return worker(args) if "RANK" in os.environ else spawn(args)


if __name__ == "__main__":
    sys.exit(main())
