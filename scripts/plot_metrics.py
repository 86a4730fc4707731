#!/usr/bin/python3
"""Plots a run's metrics.jsonl: training and validation loss, and throughput, per step.

Usage: plot_metrics.py <run_dir> [<run_dir> ...]  -> writes <first run_dir>/loss.png
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(run_dirs):
    fig, (ax_loss, ax_rate) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run_dir in run_dirs:
        rows = read(run_dir)
        label = os.path.basename(os.path.normpath(run_dir))
        ax_loss.plot([r["step"] for r in rows], [r["loss"] for r in rows], label=f"{label} train", linewidth=1)
        val = [r for r in rows if "val_loss" in r]
        if val:
            ax_loss.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label=f"{label} val")
        ax_rate.plot([r["step"] for r in rows], [r["tokens_per_s"] for r in rows], label=label, linewidth=1)
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.set_title("loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_rate.set_xlabel("step")
    ax_rate.set_ylabel("tokens/s")
    ax_rate.set_title("throughput")
    ax_rate.grid(alpha=0.3)
    ax_rate.legend()
    fig.tight_layout()
    out = os.path.join(run_dirs[0], "loss.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: plot_metrics.py <run_dir> [<run_dir> ...]")
    main(sys.argv[1:])
