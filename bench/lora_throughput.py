#!/usr/bin/python3
"""LoRA fine-tuning, Cadre against PEFT on PyTorch 2.11 FSDP2, 2 ranks, one sitting at a time.

The model: Llama 3.2 1B's shapes (dim 2048, 32 heads, 8 kv heads, FFN 8192, vocabulary 128256,
tied embeddings) with --layers of its 16 layers (8: ~0.75B parameters), random weights drawn on
each side (values do not change speed or memory). LoRA rank 16, alpha 32, no dropout, on every
projection (q, k, v, o, gate, up, down; PEFT's all-linear); the base frozen.

Both sides: 2 ranks x 1 thread, 1 sequence of 256 tokens per rank and step (the SOTU shards),
bf16 compute with float32 adapter masters and float32 gradient reduction (Cadre's
param_dtype bfloat16 / reduce_dtype float32; FSDP2's MixedPrecisionPolicy), every block's
activations checkpointed, AdamW with clipping. The peer is what a careful PyTorch user runs
(bench/torch_peer.py --lora): PEFT's get_peft_model on the same Llama (python/llama_ref.py, SDPA
attention), FSDP2 fully_shard per block and at the root over Gloo, the model built on the meta
device and materialised after sharding, the frozen base stored in bf16 (as Cadre keeps it under
bf16 compute) and the adapters in float32, AdamW(fused=True), jemalloc (Cadre has its own block
cache). Sittings alternate (Cadre, peer, Cadre, peer, ...); tokens/s is each run's median step
after 2 warm-up steps; peak RSS is rank 0's high-water mark (VmHWM) on both sides, whole and
above the process's RSS before the model (libraries loaded: the CUDA wheel's torch is far larger
than Cadre's libtorch). The table gives the median across sittings, the spread (min-max) and the
ratio of medians.

Usage: bench/lora_throughput.py [--build build] [--layers 8] [--steps 6] [--sittings 3]
Writes bench/results/lora_throughput.{json,md}.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from big_model_start import JEMALLOC, ensure_jemalloc  # noqa: E402
from train_throughput import ensure_dataset, peer_python, run  # noqa: E402

SHAPE = dict(dim=2048, n_heads=32, n_kv_heads=8, ffn_dim=8192, vocab_size=128256, max_seq_len=256,
             norm_eps=1e-5, rope_theta=500000.0, tie_embeddings=True, multiple_of=256)
RANK, ALPHA = 16, 32
WARMUP = 2


def model_of(layers):
    return dict(SHAPE, n_layers=layers)


def cadre_side(args, data, work, tag):
    run_dir = os.path.join(work, f"cadre-{tag}")
    sets = [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in model_of(args.layers).items()]
    sets += [f"data.dir={data}", f"run.dir={run_dir}", f"train.steps={args.steps}", "train.eval_interval=0",
             "train.threads=1", "data.batch_size=1", "checkpoint.interval=0", "parallel.strategy=FULL_SHARD",
             "parallel.mixed_precision.param_dtype=bfloat16", "parallel.mixed_precision.reduce_dtype=float32",
             "parallel.activation_checkpointing=true", f"lora.rank={RANK}", f"lora.alpha={ALPHA}",
             "lora.targets=all-linear", "optim.warmup_steps=0", "optim.lr=0.001"]
    cmd = [args.cadre, "run", "--nproc-per-node", "2", "--log-dir", os.path.join(run_dir, "logs"), "--",
           args.cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml")]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))][WARMUP:]
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    log = open(os.path.join(run_dir, "logs", "round_0", "rank_0", "stderr.log")).read()
    baseline = int(re.search(r"rss_before_model_bytes=(\d+)", log).group(1))
    return dict(tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
                peak_rss_bytes=summary["peak_rss_bytes"], baseline_rss_bytes=baseline,
                above_baseline_bytes=summary["peak_rss_bytes"] - baseline, final_loss=rows[-1]["loss"])


def peer_side(args, data):
    model = dict(model_of(args.layers))
    env = dict(os.environ)
    if ensure_jemalloc():
        env["LD_PRELOAD"] = JEMALLOC
    out = run([peer_python(), os.path.join(ROOT, "bench/torch_peer.py"), "--data", data, "--model", json.dumps(model),
               "--mode", "fsdp2", "--world", "2", "--threads", "1", "--batch", "1", "--precision", "bf16", "--ac",
               "--lora", str(RANK), "--base-dtype", "bf16", "--fused", "--meta", "--steps", str(args.steps),
               "--warmup", str(WARMUP)], env=env)
    result = json.loads(out.strip().splitlines()[-1])
    result["above_baseline_bytes"] = result["peak_rss_bytes"] - result["baseline_rss_bytes"]
    return result


def summarise(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--sittings", type=int, default=3)
    args = ap.parse_args()
    args.cadre = os.path.join(args.build, "bin", "cadre")
    data = ensure_dataset(args.cadre)
    sittings = []
    with tempfile.TemporaryDirectory(prefix="cadre-lora-bench-") as work:
        for k in range(args.sittings):
            c = cadre_side(args, data, work, str(k))
            p = peer_side(args, data)
            sittings.append(dict(cadre=c, peer=p))
            print(f"sitting {k + 1}/{args.sittings}: Cadre {c['tokens_per_s']:.0f} tok/s, peak RSS "
                  f"{c['peak_rss_bytes'] / 2**20:.0f} MiB; peer {p['tokens_per_s']:.0f} tok/s, "
                  f"{p['peak_rss_bytes'] / 2**20:.0f} MiB", file=sys.stderr, flush=True)
    result = {"layers": args.layers, "steps": args.steps, "rank": RANK, "alpha": ALPHA, "sittings": sittings,
              "torch": sittings[0]["peer"]["torch"]}
    for side in ("cadre", "peer"):
        result[side] = {key: summarise([s[side][key] for s in sittings])
                        for key in ("tokens_per_s", "peak_rss_bytes", "above_baseline_bytes")}
    for key in ("tokens_per_s", "peak_rss_bytes", "above_baseline_bytes"):
        result[key + "_ratio"] = result["cadre"][key]["median"] / result["peer"][key]["median"]
    out = os.path.join(ROOT, "bench", "results", "lora_throughput")
    with open(out + ".json", "w") as f:
        json.dump(result, f, indent=2)

    def row(name, key, scale, unit):
        c, p = result["cadre"][key], result["peer"][key]
        return (f"| {name} | {c['median'] / scale:.0f} {unit} ({c['min'] / scale:.0f}-{c['max'] / scale:.0f}) | "
                f"{p['median'] / scale:.0f} {unit} ({p['min'] / scale:.0f}-{p['max'] / scale:.0f}) | "
                f"{c['median'] / p['median']:.2f} |")

    lines = [f"# LoRA fine-tuning, {args.layers}-layer Llama 3.2 1B-shaped model, rank {RANK} on every projection, "
             f"2 ranks x 1 thread, bf16 compute, activation checkpointing; {args.sittings} sittings, median (min-max)",
             "", f"Peer: PEFT + FSDP2 on torch {result['torch']}, AdamW(fused=True), meta-device init, the base in bf16, "
             "jemalloc.", "",
             "| | Cadre | peer | Cadre / peer |", "|---|---|---|---|",
             row("tokens/s (2 ranks)", "tokens_per_s", 1, "tok/s"),
             row("peak RSS, rank 0", "peak_rss_bytes", 2**20, "MiB"),
             row("peak RSS above its baseline, rank 0", "above_baseline_bytes", 2**20, "MiB"), "",
             "The baseline is each process's RSS before the model: libraries loaded and the process group up "
             f"(Cadre {result['cadre']['peak_rss_bytes']['median'] / 2**20 - result['cadre']['above_baseline_bytes']['median'] / 2**20:.0f} MiB, "
             f"the peer's CUDA wheel with peft {result['peer']['peak_rss_bytes']['median'] / 2**20 - result['peer']['above_baseline_bytes']['median'] / 2**20:.0f} MiB; "
             "medians). Both keep the frozen base as bf16 shards (the peer's parameters stored in bf16; Cadre's frozen "
             "flat parameters in the compute dtype) and the adapters' masters in float32.", ""]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
