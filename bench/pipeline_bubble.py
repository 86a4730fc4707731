#!/usr/bin/python3
"""Pipeline parallelism against PyTorch's torch.distributed.pipelining, side by side: the small
Llama (configs/small.yaml, 35.7M parameters, 8 blocks) in 2 stages, one rank x 1 thread each,
16 x 256 tokens per step in 8 micro-batches, float32, fused AdamW and global-norm clipping on
both sides, jemalloc preloaded for the peer (Cadre has its own block cache), the same stage boundaries (Cadre's balanced split, read from its log), under GPipe,
1F1B and interleaved 1F1B (2 chunks of 2 blocks per stage). Sittings alternate the sides.

For each schedule it prints Cadre's tokens/s, the peer's, their ratio, and Cadre's measured
bubble against the schedule's theory (p - 1) / (v m + p - 1) (v chunks per stage; 1 but for
interleaved): from each step's stage timelines
(metrics.jsonl's pp_stage_compute_s and pp_stage_wait_s), the idle share of the stages over the
step, 1 - sum(compute) / (p x max(compute + wait)), median over the timed steps. The theory
assumes equal stages: where the split leaves them unequal (the last stage also runs the head
and the loss), the measured bubble includes that imbalance. Goals (issue #53): tokens/s >= 1.2x
the peer's, bubble within 0.1 of theory. 4 stages on 2 cores cannot measure a bubble honestly
(two ranks share a core): with --four they are reported without a goal.

Usage: bench/pipeline_bubble.py [--build build] [--sittings 3] [--steps 10] [--four]
Writes bench/results/pipeline_bubble.{json,md}. Cost on 2 cores: ~3 minutes per sitting.
Run it on a quiet machine: timings are only indicative while other jobs run.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from big_model_start import JEMALLOC, ensure_jemalloc  # noqa: E402
from train_throughput import MODEL, ensure_dataset, peer_python, run  # noqa: E402

GLOBAL_BATCH, MICRO = 16, 8
WARMUP = 2


def cadre_pipeline(cadre, data, work, name, stages, schedule, steps):
    run_dir = os.path.join(work, name)
    sets = [f"data.dir={data}", f"run.dir={run_dir}", "train.eval_interval=0", "train.threads=1",
            f"train.steps={steps}", "checkpoint.at_end=false", f"parallel.pp_size={stages}",
            "parallel.mixed_precision.param_dtype=float32",
            f"parallel.pp_schedule={schedule}", f"optim.grad_accum_steps={MICRO}",
            f"data.batch_size={GLOBAL_BATCH // MICRO}"]
    cmd = [cadre, "run", "--nproc-per-node", str(stages), "--log-dir", os.path.join(run_dir, "logs"), "--",
           cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml")]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))][WARMUP:]
    bubbles = []
    for r in rows:
        compute, wait = r["pp_stage_compute_s"], r["pp_stage_wait_s"]
        makespan = max(c + w for c, w in zip(compute, wait))
        bubbles.append(1 - sum(compute) / (len(compute) * makespan))
    bounds = json.load(open(os.path.join(run_dir, "summary.json")))["pp_bounds"]
    return dict(tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
                bubble=statistics.median(bubbles), bounds=bounds,
                final_loss=rows[-1]["loss"])


def chunks_of(schedule):
    return 2 if schedule == "interleaved" else 1


def peer_pipeline(data, stages, schedule, steps, bounds):
    out = run([peer_python(), os.path.join(ROOT, "bench/pipeline_peer.py"), "--data", data, "--model",
               json.dumps(MODEL), "--bounds", ",".join(str(b) for b in bounds), "--schedule", schedule,
               "--chunks", str(chunks_of(schedule)),
               "--world", str(stages), "--threads", "1", "--steps", str(steps), "--warmup", str(WARMUP),
               "--batch", str(GLOBAL_BATCH), "--micro", str(MICRO)],
              env=dict(os.environ, LD_PRELOAD=JEMALLOC))  # the peer's allocator (Cadre has its own block cache)
    return json.loads(out.strip().splitlines()[-1])


def spread(values):
    return dict(median=statistics.median(values), min=min(values), max=max(values), sittings=values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sittings", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--four", action="store_true", help="also 4 stages (2 per core: no goal)")
    args = ap.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    data = ensure_dataset(cadre)
    ensure_jemalloc()
    layouts = [(2, "gpipe"), (2, "1f1b"), (2, "interleaved")] + ([(4, "1f1b")] if args.four else [])
    results = {f"{p} {s}": dict(cadre=[], peer=[], bubble=[], bounds=None) for p, s in layouts}
    with tempfile.TemporaryDirectory() as work:
        for sitting in range(args.sittings):
            for p, s in layouts:
                key = f"{p} {s}"
                name = f"cadre-{p}-{s}-{sitting}"
                first_cadre = sitting % 2 == 0 or results[key]["bounds"] is None
                if first_cadre:
                    c = cadre_pipeline(cadre, data, work, name, p, s, args.steps)
                    results[key]["bounds"] = c["bounds"]
                peer = peer_pipeline(data, p, s, args.steps, results[key]["bounds"])
                if not first_cadre:
                    c = cadre_pipeline(cadre, data, work, name, p, s, args.steps)
                results[key]["cadre"].append(c["tokens_per_s"])
                results[key]["peer"].append(peer["tokens_per_s"])
                results[key]["bubble"].append(c["bubble"])
                results[key]["torch"] = peer["torch"]
                print(f"sitting {sitting + 1}/{args.sittings} {key}: Cadre {c['tokens_per_s']:.0f} tokens/s "
                      f"(bubble {c['bubble']:.3f}), torch.distributed.pipelining {peer['tokens_per_s']:.0f}",
                      file=sys.stderr, flush=True)
    lines = [f"Llama 35.7M (8 blocks), float32, one rank x 1 thread per stage, {GLOBAL_BATCH} x 256 tokens per step "
             f"in {MICRO} micro-batches, {args.steps} steps (median after {WARMUP}); {args.sittings} sittings: "
             "median (min-max)", "",
             "| stages, schedule | split | Cadre tokens/s | torch.distributed.pipelining | ratio | Cadre bubble | "
             "theory | goal |", "|---|---|---:|---:|---:|---:|---:|---|"]
    out = dict(global_batch=GLOBAL_BATCH, micro_batches=MICRO, steps=args.steps, sittings=args.sittings, rows=[])
    for p, s in layouts:
        r = results[f"{p} {s}"]
        ratios = [a / b for a, b in zip(r["cadre"], r["peer"])]
        theory = (p - 1) / (chunks_of(s) * MICRO + p - 1)
        c, q, ratio, bubble = spread(r["cadre"]), spread(r["peer"]), spread(ratios), spread(r["bubble"])
        goal = "none (2 ranks per core)" if p > 2 else (
            f"ratio >= 1.2: {'met' if ratio['median'] >= 1.2 else 'not met'}; bubble within 0.1: "
            f"{'met' if abs(bubble['median'] - theory) <= 0.1 else 'not met'}")
        fmt = lambda d, f: f"{d['median']:{f}} ({d['min']:{f}}-{d['max']:{f}})"
        lines.append(f"| {p}, {s} | {r['bounds']} | {fmt(c, '.0f')} | {fmt(q, '.0f')} | {fmt(ratio, '.2f')} | "
                     f"{fmt(bubble, '.3f')} | {theory:.3f} | {goal} |")
        out["rows"].append(dict(stages=p, schedule=s, bounds=r["bounds"], cadre=c, peer=q, ratio=ratio, bubble=bubble,
                                theory=theory, torch=r.get("torch")))
    table = "\n".join(lines)
    print(table)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    json.dump(out, open(os.path.join(ROOT, "bench", "results", "pipeline_bubble.json"), "w"), indent=2)
    open(os.path.join(ROOT, "bench", "results", "pipeline_bubble.md"), "w").write(table + "\n")


if __name__ == "__main__":
    main()
