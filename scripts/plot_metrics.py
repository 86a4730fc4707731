#!/usr/bin/python3
"""Plots a run's metrics.jsonl: training and validation loss, throughput, and for classifiers
validation accuracy, per step.

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
    runs = [read(d) for d in run_dirs]
    accuracy = any("val_accuracy" in r for rows in runs for r in rows)
    fig, axes = plt.subplots(1, 3 if accuracy else 2, figsize=(18 if accuracy else 12, 4.5))
    ax_loss, ax_rate = axes[0], axes[1]
    unit = "images" if any("images_per_s" in r for rows in runs for r in rows) else "tokens"
    for run_dir, rows in zip(run_dirs, runs):
        label = os.path.basename(os.path.normpath(run_dir))
        ax_loss.plot([r["step"] for r in rows], [r["loss"] for r in rows], label=f"{label} train", linewidth=1)
        val = [r for r in rows if "val_loss" in r]
        if val:
            ax_loss.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label=f"{label} val")
        ax_rate.plot([r["step"] for r in rows], [r[f"{unit}_per_s"] for r in rows], label=label, linewidth=1)
        if accuracy:
            acc = [r for r in rows if "val_accuracy" in r]
            axes[2].plot([r["step"] for r in acc], [100 * r["val_accuracy"] for r in acc], "o-", label=label)
            for r in acc[-1:]:
                axes[2].annotate(f"{100 * r['val_accuracy']:.2f}%", (r["step"], 100 * r["val_accuracy"]),
                                 textcoords="offset points", xytext=(-30, -15))
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.set_title("loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_rate.set_xlabel("step")
    ax_rate.set_ylabel(f"{unit}/s")
    ax_rate.set_title("throughput")
    ax_rate.grid(alpha=0.3)
    ax_rate.legend()
    if accuracy:
        axes[2].set_xlabel("step")
        axes[2].set_ylabel("validation accuracy (%)")
        axes[2].set_title("accuracy on held-out samples")
        axes[2].set_ylim(80, 100)
        axes[2].grid(alpha=0.3)
        axes[2].legend()
    fig.tight_layout()
    out = os.path.join(run_dirs[0], "loss.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: plot_metrics.py <run_dir> [<run_dir> ...]")
    main(sys.argv[1:])
