#!/usr/bin/python3
"""Sharding strategies side by side in one run: throughput on 2 ranks x 1 thread against Python
PyTorch DDP over Gloo (Python FSDP 1.13 cannot run on CPU), the step time with and without
prefetch, and per-rank model-state memory at world sizes 1, 2 and 4 against the ZeRO/FSDP
formula (16 bytes per parameter over the shard group, plus a resident compute copy).

Usage: bench/fsdp_strategies.py [--build build] [--steps 8] [--precision bfloat16|float32]
Writes bench/results/fsdp_strategies.{json,md}. Cost on 2 shared cores: ~10-20 minutes.
Timing is only indicative while other jobs run on the machine.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from train_throughput import MODEL, ensure_dataset, peer_python, run  # noqa: E402


def cadre_train(cadre, data, work, name, world, sets):
    run_dir = os.path.join(work, name)
    cmd = [cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml"), "--set", f"data.dir={data}",
           "--set", f"run.dir={run_dir}", "--set", "train.eval_interval=0", "--set", "train.threads=1"]
    for s in sets:
        cmd += ["--set", s]
    if world > 1:
        cmd = [cadre, "run", "--nproc-per-node", str(world), "--log-dir", os.path.join(run_dir, "logs"), "--"] + cmd
    run(cmd)
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rates = sorted(r["tokens_per_s"] for r in rows[2:]) or [rows[-1]["tokens_per_s"]]
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    return rates[len(rates) // 2], summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--precision", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--memory-only", action="store_true")
    args = ap.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    data = ensure_dataset(cadre)
    mp = [f"parallel.mixed_precision.param_dtype={args.precision}"]
    out = dict(precision=args.precision, throughput=[], memory=[])
    with tempfile.TemporaryDirectory() as work:
        # Throughput: 2 ranks x 1 thread, batch 8 x 256 per rank.
        peer = {"tokens_per_s": float("nan")} if args.memory_only else json.loads(run([peer_python(), os.path.join(ROOT, "bench/torch_peer.py"), "--data", data,
                               "--model", json.dumps(MODEL), "--steps", str(args.steps), "--world", "2",
                               "--mode", "ddp", "--threads", "1",
                               "--precision", "bf16" if args.precision == "bfloat16" else "fp32"]))
        out["throughput"].append(dict(name="Python DDP (Gloo)", tokens_per_s=peer["tokens_per_s"]))
        for name, sets in [("NO_SHARD", ["parallel.strategy=NO_SHARD"]),
                           ("FULL_SHARD", ["parallel.strategy=FULL_SHARD"]),
                           ("FULL_SHARD, no prefetch", ["parallel.strategy=FULL_SHARD", "parallel.prefetch=false"]),
                           ("SHARD_GRAD_OP", ["parallel.strategy=SHARD_GRAD_OP"])]:
            if args.memory_only:
                break
            rate, s = cadre_train(cadre, data, work, "tp-" + name.replace(" ", "").replace(",", "-"), 2,
                                  mp + sets + [f"train.steps={args.steps}", "data.batch_size=8"])
            out["throughput"].append(dict(name="Cadre " + name, tokens_per_s=rate,
                                          state_bytes=s["memory"]["state_bytes"]))
        # Memory: 2 steps per run, batch 2 per rank.
        for strategy, worlds in [("NO_SHARD", [1, 2, 4]), ("FULL_SHARD", [1, 2, 4]), ("SHARD_GRAD_OP", [2, 4]),
                                 ("HYBRID_SHARD", [4])]:
            for world in worlds:
                sets = mp + [f"parallel.strategy={strategy}", "train.steps=2", "data.batch_size=2"]
                if strategy == "HYBRID_SHARD":
                    sets.append("parallel.shard_group_size=2")
                _, s = cadre_train(cadre, data, work, f"mem-{strategy}-{world}", world, sets)
                out["memory"].append(dict(strategy=strategy, world=world, **s["memory"]))
    mib = lambda b: b / 2**20
    lines = [f"Throughput: Llama 35.7M, {args.precision}, 2 ranks x 1 thread, batch 8 x 256 per rank, "
             f"{args.steps} steps (median after 2)", "",
             "| run | tokens/s | vs Python DDP | model state per rank (MiB) |", "|---|---:|---:|---:|"]
    base = out["throughput"][0]["tokens_per_s"]
    for r in out["throughput"]:
        st = f"{mib(r['state_bytes']):.1f}" if "state_bytes" in r else "-"
        lines.append(f"| {r['name']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s'] / base:.2f}x | {st} |")
    lines += ["", f"Memory per rank (MiB), {args.precision} compute, float32 masters/grads/AdamW; "
              "formula = 16 bytes x padded params / shard group (+ resident compute copy)", "",
              "| strategy | world | params | grads | optimizer | state | formula | gathered peak | peak RSS |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in out["memory"]:
        lines.append(f"| {m['strategy']} | {m['world']} | {mib(m['param_bytes']):.1f} | {mib(m['grad_bytes']):.1f} | "
                     f"{mib(m['optimizer_bytes']):.1f} | {mib(m['state_bytes']):.1f} | "
                     f"{mib(m['formula_state_bytes']):.1f} | {mib(m['peak_working_bytes']):.1f} | "
                     f"{mib(m['peak_rss_bytes']):.0f} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    json.dump(out, open(os.path.join(ROOT, "bench", "results", "fsdp_strategies.json"), "w"), indent=2)
    open(os.path.join(ROOT, "bench", "results", "fsdp_strategies.md"), "w").write(table + "\n")


if __name__ == "__main__":
    main()
