#!/usr/bin/python3
"""Observability's cost on the demo configuration (small Llama, 2 ranks x 1 thread, FULL_SHARD,
bf16, batch 8 x 256 per rank), side by side in one run:

  on:  cadre run --metrics-port (scraped every second, 10x Prometheus's usual rate) --stall-timeout 30,
       obs defaults (per-step reports to the agent, straggler tracking, flight recorder of 2000)
  off: cadre run --stall-timeout 0, obs.metrics=false obs.straggler_factor=0 obs.flight_recorder_entries=0

alternating off/on --pairs times, median step time over steps 3..N of each run. On 2 shared cores
the end-to-end figure moves by several percent between runs of the *same* setting, far more than
the effect, so the instrumentation is also timed directly (build/bin/obs_cost: ns per recorded
collective, per step report, per straggler update) and set against the step: collectives per
step (from the agent's own counters) x cost per collective + per-step costs, over the step time.

Usage: bench/obs_overhead.py [--build build] [--steps 12] [--pairs 2]
Writes bench/results/obs_overhead.{json,md}. Cost: ~1 minute per run here (4 runs by default).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from train_throughput import ensure_dataset, run  # noqa: E402

DEMO = ["parallel.strategy=FULL_SHARD", "train.threads=1", "train.eval_interval=0", "data.batch_size=8"]
OFF = ["obs.metrics=false", "obs.straggler_factor=0", "obs.flight_recorder_entries=0"]


def train(cadre, data, work, name, steps, on):
    run_dir = os.path.join(work, name)
    logs = os.path.join(run_dir, "logs")
    agent = [cadre, "run", "--nproc-per-node", "2", "--log-dir", logs]
    agent += ["--metrics-port", "0", "--stall-timeout", "30"] if on else ["--stall-timeout", "0"]
    cmd = agent + ["--", cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml"), "--set",
                   f"data.dir={data}", "--set", f"run.dir={run_dir}", "--set", f"train.steps={steps}"]
    for s in DEMO + ([] if on else OFF):
        cmd += ["--set", s]
    last_scrape = {}
    done = threading.Event()

    def scrape():  # what a (very eager) Prometheus would do
        url_file = os.path.join(logs, "metrics.url")
        while not done.is_set():
            try:
                url = open(url_file).read().strip()
                last_scrape["text"] = urllib.request.urlopen(url, timeout=2).read().decode()
                last_scrape["count"] = last_scrape.get("count", 0) + 1
            except Exception:
                pass
            done.wait(1.0)

    scraper = threading.Thread(target=scrape)
    if on:
        scraper.start()
    try:
        run(cmd)
    finally:
        done.set()
        if on:
            scraper.join()
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    times = [r["step_time_s"] for r in rows[2:]]
    return statistics.median(times), last_scrape


def collectives_per_step(scrape_text):
    ops = steps = 0
    for line in scrape_text.splitlines():
        m = re.match(r'cadre_collective_ops_total\{[^}]*rank="0"[^}]*\} ([0-9.e+]+)', line)
        if m:
            ops += float(m.group(1))
        m = re.match(r'cadre_train_steps_total\{[^}]*rank="0"[^}]*\} ([0-9.e+]+)', line)
        if m:
            steps = float(m.group(1))
    return ops / steps if steps else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    data = ensure_dataset(cadre)
    cost = json.loads(run([os.path.join(args.build, "bin", "obs_cost"), "2"]))
    off, on, scrapes = [], [], []
    with tempfile.TemporaryDirectory() as work:
        for p in range(args.pairs):
            off.append(train(cadre, data, work, f"off{p}", args.steps, False)[0])
            t, scrape = train(cadre, data, work, f"on{p}", args.steps, True)
            on.append(t)
            scrapes.append(scrape)
    per_step_ops = collectives_per_step(scrapes[-1].get("text", ""))
    step = statistics.median(off)
    direct_s = (per_step_ops * cost["record_ns_per_collective"] + cost["report_ns_per_step"] +
                cost["straggler_ns_per_step"]) * 1e-9
    result = dict(steps=args.steps, pairs=args.pairs, off_step_s=off, on_step_s=on,
                  ratios=[b / a for a, b in zip(off, on)], median_ratio=statistics.median(on) / statistics.median(off),
                  collectives_per_step=per_step_ops, scrapes=[s.get("count", 0) for s in scrapes], cost=cost,
                  instrumentation_s_per_step=direct_s, instrumentation_share=direct_s / step)
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    json.dump(result, open(os.path.join(ROOT, "bench/results/obs_overhead.json"), "w"), indent=1)
    lines = ["| run | off: median step (s) | on: median step (s) | on / off |", "|---|---:|---:|---:|"]
    for i, (a, b) in enumerate(zip(off, on)):
        lines.append(f"| pair {i + 1} | {a:.3f} | {b:.3f} | {b / a:.3f} |")
    lines.append(f"| all (medians) | {statistics.median(off):.3f} | {statistics.median(on):.3f} | "
                 f"{result['median_ratio']:.3f} |")
    lines += ["", f"Instrumentation timed directly: {cost['record_ns_per_collective']:.0f} ns per collective x "
              f"{per_step_ops:.0f} collectives per step + {cost['report_ns_per_step'] / 1000:.1f} us per step report + "
              f"{cost['straggler_ns_per_step'] / 1000:.2f} us straggler update = {direct_s * 1e6:.0f} us per step, "
              f"{100 * result['instrumentation_share']:.4f}% of a {step:.2f} s step."]
    open(os.path.join(ROOT, "bench/results/obs_overhead.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
