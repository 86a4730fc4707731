#!/usr/bin/env python3
"""The peer of bench/big_model_start.py: PyTorch 2.x FSDP2 starting a run from a Hugging Face
folder as its users do today, on 2 ranks (Gloo, 1 thread each):

  LlamaForCausalLM(config) on the meta device, non-reentrant activation checkpointing of every
  decoder layer, fully_shard per decoder layer and at the root (bf16 parameters, float32
  reduction), to_empty on the CPU (the rotary table, a non-persistent buffer, recomputed), then
  the folder's weights:
    --loader broadcast  rank 0 reads every safetensors file; set_model_state_dict(...,
                        StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    --loader dcp        torch.distributed.checkpoint.load into the sharded state dict through
                        HuggingFaceStorageReader (each rank reads what it needs)
  then fused AdamW and --steps steps of one 256-token sequence per rank (Cadre's token shards).

Rank 0 writes --out: launch_to_step1_s (from BENCH_LAUNCHED, the driver's clock at launch, to the
start of step 1), step1_s, load_peak_mib and train_peak_mib (VmHWM above VmRSS once torch and
transformers are imported; whole-process figures beside), tokens_per_s (median after step 1).
"""
import argparse
import glob
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
from torch_peer import load_samples  # noqa: E402


def status_mib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def build(args, config):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaForCausalLM
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mesh = init_device_mesh("cpu", (2,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    model.to_empty(device="cpu")
    with torch.no_grad():  # non-persistent: not in the folder, emptied by to_empty
        fresh = type(model.model.rotary_emb)(config=config)
        model.model.rotary_emb.inv_freq.copy_(fresh.inv_freq)
    return model


def load(args, model, rank):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
    if args.loader == "broadcast":
        from safetensors.torch import load_file
        full = {}
        if rank == 0:
            for f in sorted(glob.glob(os.path.join(args.hf, "*.safetensors"))):
                full.update(load_file(f))
        set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True,
                                                                   strict=False))
        return
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    sharded = get_model_state_dict(model)
    sharded.pop("lm_head.weight", None)  # tied: the folder holds the embedding only
    dcp.load(sharded, storage_reader=HuggingFaceStorageReader(path=args.hf))
    set_model_state_dict(model, sharded, options=StateDictOptions(strict=False))


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    # Everything imported before the baseline, as Cadre's baseline is its loaded binary.
    from safetensors import torch as _safetensors  # noqa: F401
    from torch.distributed import checkpoint as _dcp, fsdp as _fsdp  # noqa: F401
    from torch.distributed.checkpoint import state_dict as _state_dict  # noqa: F401
    from transformers import AutoConfig, LlamaForCausalLM  # noqa: F401
    base = status_mib("VmRSS")
    config = AutoConfig.from_pretrained(args.hf)
    model = build(args, config)
    load(args, model, rank)
    load_peak = status_mib("VmHWM")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    samples, seq = load_samples(args.data)
    times, step1_start = [], None
    for step in range(args.steps):
        tokens = torch.from_numpy(samples[2 * step + rank].astype("int64")).unsqueeze(0)
        start = time.time()
        step1_start = step1_start or start
        logits = model(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        dist.barrier()
        times.append(time.time() - start)
    train_peak = status_mib("VmHWM")
    if rank == 0:
        launched = float(os.environ.get("BENCH_LAUNCHED", step1_start))
        json.dump(dict(launch_to_step1_s=step1_start - launched, step1_s=times[0], baseline_mib=base,
                       load_peak_mib=load_peak - base, load_peak_whole_mib=load_peak,
                       train_peak_mib=train_peak - base, train_peak_whole_mib=train_peak,
                       tokens_per_s=statistics.median(2 * seq / t for t in times[1:]) if len(times) > 1 else 0.0,
                       loader=args.loader, torch=torch.__version__), open(args.out, "w"), indent=1)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hf", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--loader", choices=["broadcast", "dcp"], default="broadcast")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=2, join=True)


if __name__ == "__main__":
    main()
