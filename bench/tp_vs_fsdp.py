#!/usr/bin/python3
"""Tensor parallelism against data parallelism side by side in one run, on 2 ranks x 1 thread:
the small Llama (configs/small.yaml, 35.7M parameters) trained with tp=2 (one model replica
split over both ranks), FULL_SHARD dp=2, NO_SHARD dp=2 and ZERO1 dp=2, every run on the same
global batch (16 x 256 tokens per step: tp=2 gives its one replica all 16 sequences, the data
parallel runs 8 per rank). Prints tokens/s (median after 2 steps), the ratio to NO_SHARD, and
the per-rank model state (parameters, gradients, AdamW moments) with its formula.

Usage: bench/tp_vs_fsdp.py [--build build] [--steps 8] [--precision bfloat16|float32]
Writes bench/results/tp_vs_fsdp.{json,md}. Cost on 2 shared cores: ~5-10 minutes.
Timing is only indicative while other jobs run on the machine. Only CPU ranks on one machine are
measured here: multi-GPU tensor parallelism (NVLink all-reduces) is not.
"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from fsdp_strategies import cadre_train  # noqa: E402
from train_throughput import ensure_dataset  # noqa: E402

GLOBAL_BATCH = 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--precision", default="bfloat16", choices=["bfloat16", "float32"])
    args = ap.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    data = ensure_dataset(cadre)
    common = [f"parallel.mixed_precision.param_dtype={args.precision}", f"train.steps={args.steps}"]
    runs = [("NO_SHARD dp=2", ["parallel.strategy=NO_SHARD", f"data.batch_size={GLOBAL_BATCH // 2}"]),
            ("FULL_SHARD dp=2", ["parallel.strategy=FULL_SHARD", f"data.batch_size={GLOBAL_BATCH // 2}"]),
            ("ZERO1 dp=2", ["parallel.strategy=ZERO1", f"data.batch_size={GLOBAL_BATCH // 2}"]),
            ("tp=2", ["parallel.tp_size=2", f"data.batch_size={GLOBAL_BATCH}"])]
    out = dict(precision=args.precision, steps=args.steps, global_batch=GLOBAL_BATCH, rows=[])
    with tempfile.TemporaryDirectory() as work:
        for name, sets in runs:
            rate, s = cadre_train(cadre, data, work, name.replace(" ", "-").replace("=", ""), 2, common + sets)
            m = s["memory"]
            out["rows"].append(dict(name=name, tokens_per_s=rate, final_loss=s["final_loss"], **m))
    mib = lambda b: b / 2**20
    base = out["rows"][0]["tokens_per_s"]
    lines = [f"Llama 35.7M, {args.precision} compute, 2 ranks x 1 thread, global batch {GLOBAL_BATCH} x 256 tokens, "
             f"{args.steps} steps (median after 2); model state per rank in MiB", "",
             "| run | tokens/s | vs NO_SHARD | params on rank | params | grads | optimizer | state | formula |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in out["rows"]:
        lines.append(f"| {r['name']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s'] / base:.2f}x | "
                     f"{r['params_on_rank'] / 1e6:.1f}M | {mib(r['param_bytes']):.1f} | {mib(r['grad_bytes']):.1f} | "
                     f"{mib(r['optimizer_bytes']):.1f} | {mib(r['state_bytes']):.1f} | "
                     f"{mib(r['formula_state_bytes']):.1f} = {r['formula']} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    json.dump(out, open(os.path.join(ROOT, "bench", "results", "tp_vs_fsdp.json"), "w"), indent=2)
    open(os.path.join(ROOT, "bench", "results", "tp_vs_fsdp.md"), "w").write(table + "\n")


if __name__ == "__main__":
    main()
