#!/usr/bin/env python3
"""Issue #25's two collective rows: Cadre's ops against libtorch's own ProcessGroupGloo doing the
same op (the `c10d_*` rows of `cadre bench collectives`, run in the same job and timed the same
way: each op waited for before the next, the median op, slowest rank). Gloo's all-gather and
reduce-scatter are what all_gather_into_tensor and reduce_scatter_tensor run (the latter an
all-reduce of which each rank keeps its chunk, in torch 2.x); Gloo's all-reduce stays beside
every row as a reference. A build whose libtorch has no such Gloo ops (1.13) compares with the
all-reduce alone, and the table says so.

  small ops, 8 B - 64 KiB, cross-rank check on (as training runs them): latency <= 2x Gloo's
  reduce-scatter / all-gather, 1 - 256 MiB: bus bandwidth >= Gloo's same op

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
REFERENCE = "c10d_all_reduce"


def peer_of(op):
    return f"c10d_{op}"
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
    peers = sorted({peer_of(op) for op in ops} | {REFERENCE})
    cmd = [cadre, "run", "--nproc-per-node", "2", "--", cadre, "bench", "collectives", *ops, *peers,
           "--blocking", "1", *flags]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    rows = parse(out)
    if not rows:
        sys.exit(f"collectives_vs_gloo: no result rows in the output of {' '.join(cmd)}:\n{out}")
    return rows


def table(name, ops, runs, figure, bound):
    """One line per (op, size): median figure of each side over the runs, ratio against Gloo's same
    op (its all-reduce where this libtorch has no such op), goal met, Gloo's all-reduce beside."""
    lines = []
    sizes = sorted({size for rows in runs for (_, size) in rows})

    def median(op, size):
        return statistics.median(r[(op, size)][figure] for r in runs)

    for op in ops:
        for size in sizes:
            peer = peer_of(op) if all((peer_of(op), size) in r for r in runs) else REFERENCE
            ours, gloo = median(op, size), median(peer, size)
            ratio = ours / gloo
            met = ratio <= bound if figure == "time_us" else ratio >= bound
            lines.append({"sweep": name, "op": op, "bytes": size, "figure": figure, "cadre": ours, "peer": peer,
                          "gloo": gloo, "gloo_all_reduce": median(REFERENCE, size), "ratio": ratio,
                          "goal": f"{'<=' if figure == 'time_us' else '>='} {bound}", "met": met})
    return lines


def markdown(lines, meta):
    out = [f"# Collectives vs libtorch's Gloo ({meta['started']}, {meta['build']}, 2 ranks on loopback, float sum, "
           f"median of {meta['repeats']} runs; load average {meta['load_before']} -> {meta['load_after']})", "",
           "Gloo's same op is ProcessGroupGloo's all-gather (all_gather_into_tensor) or reduce-scatter "
           "(reduce_scatter_tensor: an all-reduce of which each rank keeps its chunk); `c10d_all_reduce` in the "
           "Gloo op column means this libtorch has no such op and the row compares with the all-reduce.", "",
           "| sweep | op | bytes | figure | Cadre | Gloo op | Gloo | ratio | goal | met | Gloo all_reduce |",
           "|---|---|---:|---|---:|---|---:|---:|---|---|---:|"]
    for x in lines:
        out.append(f"| {x['sweep']} | {x['op']} | {x['bytes']} | {'µs' if x['figure'] == 'time_us' else 'busbw GB/s'} "
                   f"| {x['cadre']:.2f} | {x['peer']} | {x['gloo']:.2f} | {x['ratio']:.2f} | {x['goal']} | "
                   f"{'yes' if x['met'] else '**no**'} | {x['gloo_all_reduce']:.2f} |")
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
