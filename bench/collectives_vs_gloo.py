#!/usr/bin/env python3
"""Issue #25's two collective rows: Cadre's ops against Gloo's own all-reduce (libtorch's
ProcessGroupGloo, the `c10d_all_reduce` rows of `cadre bench collectives`, run in the same job
and timed the same way: each op waited for before the next, the median op, slowest rank).

  small ops, 8 B - 64 KiB, cross-rank check on (as training runs them): latency <= 2x Gloo's
  reduce-scatter / all-gather, 1 - 256 MiB: bus bandwidth >= Gloo all-reduce's

Both sides run `--repeats` times; each row's figure is each side's median over the runs.
Usage: bench/collectives_vs_gloo.py [--build build-torch2] [--repeats 3]
Writes bench/results/collectives_vs_gloo.{json,md}.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
# (name, ops, bench flags, figure the goal reads, goal as "ours / gloo" bound)
SWEEPS = [
    ("latency", ["all_reduce", "all_gather", "reduce_scatter"],
     ["-b", "8", "-e", "64K", "-f", "2", "-n", "200", "-w", "20", "--validate", "1"], "time_us", 2.0),
    ("bandwidth", ["reduce_scatter", "all_gather"],
     ["-b", "1M", "-e", "256M", "-f", "4", "-n", "30", "-w", "3"], "busbw", 1.0),
]
ROW = re.compile(r"^\s*(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
TEST = re.compile(r"# Collective test: (\w+)")


def parse(output):
    """{(op, bytes): {"time_us": best of out/in-place, "busbw": best of out/in-place}}"""
    rows, op = {}, None
    for line in output.splitlines():
        line = re.sub(r"^\[rank \d+\]: ", "", line)
        if m := TEST.search(line):
            op = m.group(1)
        elif op and (m := ROW.match(line)):
            size, t1, _, b1, t2, _, b2 = m.groups()
            rows[(op, int(size))] = {"time_us": min(float(t1), float(t2)), "busbw": max(float(b1), float(b2))}
    return rows


def run_sweep(cadre, ops, flags):
    cmd = [cadre, "run", "--nproc-per-node", "2", "--", cadre, "bench", "collectives", *ops, "c10d_all_reduce",
           "--blocking", "1", *flags]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    rows = parse(out)
    if not rows:
        sys.exit(f"collectives_vs_gloo: no result rows in the output of {' '.join(cmd)}:\n{out}")
    return rows


def table(name, ops, runs, figure, bound):
    """One line per (op, size): median figure of each side over the runs, ratio, goal met."""
    lines = []
    sizes = sorted({size for rows in runs for (_, size) in rows})
    for op in ops:
        for size in sizes:
            ours = statistics.median(r[(op, size)][figure] for r in runs)
            gloo = statistics.median(r[("c10d_all_reduce", size)][figure] for r in runs)
            ratio = ours / gloo
            met = ratio <= bound if figure == "time_us" else ratio >= bound
            lines.append({"sweep": name, "op": op, "bytes": size, "figure": figure, "cadre": ours, "gloo": gloo,
                          "ratio": ratio, "goal": f"{'<=' if figure == 'time_us' else '>='} {bound}", "met": met})
    return lines


def markdown(lines, meta):
    out = [f"# Collectives vs Gloo's all-reduce ({meta['started']}, {meta['build']}, 2 ranks on loopback, float sum, "
           f"median of {meta['repeats']} runs; load average {meta['load_before']} -> {meta['load_after']})", "",
           "| sweep | op | bytes | figure | Cadre | Gloo all_reduce | ratio | goal | met |",
           "|---|---|---:|---|---:|---:|---:|---|---|"]
    for x in lines:
        out.append(f"| {x['sweep']} | {x['op']} | {x['bytes']} | {'µs' if x['figure'] == 'time_us' else 'busbw GB/s'} "
                   f"| {x['cadre']:.2f} | {x['gloo']:.2f} | {x['ratio']:.2f} | {x['goal']} | "
                   f"{'yes' if x['met'] else '**no**'} |")
    met = sum(x["met"] for x in lines)
    out += ["", f"{met} of {len(lines)} rows meet the goal."]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-torch2"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    if not os.access(cadre, os.X_OK):
        sys.exit(f"collectives_vs_gloo: no {cadre}: build it first")
    if args.repeats < 1:
        sys.exit(f"collectives_vs_gloo: --repeats must be at least 1, not {args.repeats}")
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "build": os.path.relpath(args.build, ROOT),
            "repeats": args.repeats, "load_before": open("/proc/loadavg").read().split()[0]}
    lines, t0, total, done = [], time.time(), args.repeats * len(SWEEPS), 0
    for name, ops, flags, figure, bound in SWEEPS:
        runs = []
        for _ in range(args.repeats):
            runs.append(run_sweep(cadre, ops, flags))
            done += 1
            rate = (time.time() - t0) / done
            print(f"collectives_vs_gloo: {done}/{total} runs, {rate:.0f} s per run, ETA {rate * (total - done):.0f} s",
                  file=sys.stderr, flush=True)
        lines += table(name, ops, runs, figure, bound)
    meta["load_after"] = open("/proc/loadavg").read().split()[0]
    results = os.path.join(ROOT, "bench", "results")
    with open(os.path.join(results, "collectives_vs_gloo.json"), "w") as f:
        json.dump({"meta": meta, "rows": lines}, f, indent=1)
    text = markdown(lines, meta)
    with open(os.path.join(results, "collectives_vs_gloo.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
