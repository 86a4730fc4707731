#!/usr/bin/python3
"""Plots a recovery soak's soak.json (tests/soak/recovery_soak_test.cpp): per fault kind, every
fault's detection time and time to training again (dots, failures in red), with the median.

Usage: plot_soak.py <soak.json>  -> writes soak.png beside it
"""
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KINDS = ["worker_kill", "agent_kill", "node_cut", "hang", "etcd_kill"]


def main(path):
    with open(path) as f:
        soak = json.load(f)
    faults = soak["faults"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=False)
    for ax, field, title in ((axes[0], "detect_s", "fault -> first agent acting on it"),
                             (axes[1], "resume_s", "fault -> training again")):
        for x, kind in enumerate(KINDS):
            rows = [f for f in faults if f["kind"] == kind and f[field] >= 0]
            ok = [f[field] for f in rows if f["survived"] and f["losses_exact"]]
            bad = [f[field] for f in rows if not (f["survived"] and f["losses_exact"])]
            jitter = lambda i: x + ((i % 7) - 3) * 0.04  # noqa: E731
            ax.scatter([jitter(i) for i in range(len(ok))], ok, s=14, color="tab:blue")
            ax.scatter([jitter(i) for i in range(len(bad))], bad, s=24, color="tab:red", marker="x")
            if ok:
                m = statistics.median(ok)
                ax.hlines(m, x - 0.3, x + 0.3, color="black", linewidth=1)
                ax.annotate(f"{m:.2f} s", (x + 0.32, m), fontsize=8, va="center")
        counts = [sum(1 for f in faults if f["kind"] == k) for k in KINDS]
        ax.set_xticks(range(len(KINDS)), [f"{k}\n({n})" for k, n in zip(KINDS, counts)])
        ax.set_ylabel("seconds")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    survived = sum(1 for f in faults if f["survived"] and f["losses_exact"])
    fig.suptitle(f"recovery soak: {survived} of {len(faults)} faults survived with exact losses "
                 f"(seed {soak['seed']}, {soak.get('strategy', 'NO_SHARD')}"
                 + (f", copies every {soak['memory_interval']} steps" if soak.get("memory_interval") else "")
                 + "; red x: failed)")
    fig.tight_layout()
    out = os.path.join(os.path.dirname(os.path.abspath(path)), "soak.png")
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
