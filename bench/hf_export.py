#!/usr/bin/env python3
"""Exporting a model as a Hugging Face folder: Cadre against transformers' own save_pretrained (issue #49).

The model: the large-model issue's 1B-class Llama (Llama 3.2 1B's shapes, 8 of its 16 layers, ~0.75B
parameters, tied embeddings), random weights in a bf16 folder written by transformers
(bench/big_model_start.py's folder; --keep reuses it).

  Cadre     `cadre ckpt import` once (the float32 checkpoint training leaves), then per sitting
            `cadre ckpt export <checkpoint> --format hf --max-shard-size 5GB`: bf16 (the dtype the
            model came in), streamed from the checkpoint in 64 MiB chunks.
  peer      what a transformers user runs to write the same weights: LlamaForCausalLM.from_pretrained
            (bf16) then save_pretrained(max_shard_size="5GB"); one process, timed around save_pretrained
            (and in all), jemalloc (LD_PRELOAD, as the peers of the other benchmarks).

Per side: wall time of the export (the peer's save_pretrained, its load beside), peak RSS of the
whole process (its own VmHWM, from wait4) and above the process's baseline (Cadre: before the first
tensor; peer: after importing torch and transformers). Sittings alternate sides; the median and the
spread (min..max) of each figure are reported, never the best sitting.

Usage: bench/hf_export.py [--build build] [--repeats 3] [--keep DIR]
Writes bench/results/hf_export.{json,md}. ~3 minutes a sitting on 2 cores; a quiet machine.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from big_model_start import JEMALLOC, SHAPE, ensure_jemalloc, write_folder  # noqa: E402
from train_throughput import peer_python  # noqa: E402

PEER = r"""
import json, resource, sys, time
t0 = time.time()
import torch, transformers
from transformers import LlamaForCausalLM
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
base = rss()
torch.set_num_threads(2)
t1 = time.time()
model = LlamaForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
t2 = time.time()
model.save_pretrained(sys.argv[2], max_shard_size="5GB")
t3 = time.time()
print(json.dumps(dict(baseline=base, load_s=t2 - t1, save_s=t3 - t2, versions=[torch.__version__, transformers.__version__])))
"""


def timed(cmd, env=None):
    """(wall seconds, peak RSS bytes of the process itself, stdout)."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(out[-4000:])
        raise SystemExit(f"{cmd[0]} exited {proc.returncode}")
    return time.time() - start, usage.ru_maxrss * 1024, out


def cadre_sitting(cadre, checkpoint, out):
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, text = timed([cadre, "ckpt", "export", checkpoint, "--format", "hf", "--out", out, "--max-shard-size", "5GB"])
    base = float(re.search(r"\((\d+) MiB before the first tensor\)", text).group(1)) * 2**20
    assert "in bfloat16" in text, text
    return dict(export_s=wall, peak_mib=peak / 2**20, above_baseline_mib=(peak - base) / 2**20)


def peer_sitting(hf, out):
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    if os.path.exists(JEMALLOC):
        env["LD_PRELOAD"] = JEMALLOC
    wall, peak, text = timed([peer_python(), "-c", PEER, hf, out], env)
    r = json.loads(text.strip().splitlines()[-1])
    return dict(export_s=r["save_s"], load_s=r["load_s"], process_s=wall, peak_mib=peak / 2**20,
                above_baseline_mib=(peak - r["baseline"]) / 2**20, versions=r["versions"])


def summary(rows, key):
    values = [r[key] for r in rows]
    return dict(median=statistics.median(values), min=min(values), max=max(values))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep", help="work directory (the folder and its import are written once and reused)")
    args = p.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    ensure_jemalloc()
    work = args.keep or tempfile.mkdtemp(prefix="cadre-hf-export-")
    os.makedirs(work, exist_ok=True)
    hf = write_folder(os.path.join(work, f"hf-{SHAPE['layers']}"), SHAPE)
    checkpoint = os.path.join(work, "imported")
    if not os.path.isdir(checkpoint):
        timed([cadre, "ckpt", "import", "--from", "hf", hf, "--out", checkpoint])
    cadre_rows, peer_rows = [], []
    for k in range(args.repeats):
        cadre_rows.append(cadre_sitting(cadre, checkpoint, os.path.join(work, "out-cadre")))
        peer_rows.append(peer_sitting(hf, os.path.join(work, "out-peer")))
        print(f"sitting {k + 1}/{args.repeats}: cadre {cadre_rows[-1]}, peer {peer_rows[-1]}", file=sys.stderr, flush=True)
    result = dict(model=SHAPE, when=time.strftime("%Y-%m-%d %H:%M"), sittings=args.repeats,
                  cadre={k: summary(cadre_rows, k) for k in ("export_s", "peak_mib", "above_baseline_mib")},
                  peer={k: summary(peer_rows, k) for k in ("export_s", "load_s", "peak_mib", "above_baseline_mib")},
                  peer_versions=peer_rows[0]["versions"], rows=dict(cadre=cadre_rows, peer=peer_rows))
    lines = [f"# Hugging Face export, {SHAPE['layers']}-layer 1B-class Llama (bf16 out), {args.repeats} sittings, "
             f"{result['when']}", "",
             "| figure | Cadre (median, min..max) | transformers save_pretrained | Cadre / peer |", "|---|---|---|---|"]
    for key, label in (("export_s", "export time, s"), ("peak_mib", "peak RSS, MiB"),
                       ("above_baseline_mib", "peak RSS above baseline, MiB")):
        c, q = result["cadre"][key], result["peer"][key]
        lines.append(f"| {label} | {c['median']:.1f} ({c['min']:.1f}..{c['max']:.1f}) | "
                     f"{q['median']:.1f} ({q['min']:.1f}..{q['max']:.1f}) | {c['median'] / q['median']:.2f} |")
    lines.append(f"\nThe peer's from_pretrained before it: {result['peer']['load_s']['median']:.1f} s (median); "
                 f"torch {result['peer_versions'][0]}, transformers {result['peer_versions'][1]}.")
    text = "\n".join(lines)
    print(text)
    out = os.path.join(ROOT, "bench/results/hf_export")
    json.dump(result, open(out + ".json", "w"), indent=1)
    open(out + ".md", "w").write(text + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
