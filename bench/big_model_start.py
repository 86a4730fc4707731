#!/usr/bin/env python3
"""Starting a run from a Hugging Face folder: Cadre against PyTorch 2.x FSDP2, one sitting (issue #48).

The model: Llama 3.2 1B's shapes (dim 2048, 32 heads, 8 kv heads, FFN 8192, vocabulary 128256,
tied embeddings) with 8 of its 16 layers (--layers; 8: ~0.75B parameters, 4: 0.51B), random weights in a Hugging Face
folder written by transformers (bf16, 4 safetensors files). 2 ranks, FULL_SHARD, bf16 compute with
float32 masters and reduction, activation checkpointing of every block, 1 thread per rank, one
256-token sequence per rank per step (the SOTU shards), AdamW.

  Cadre      cadre run --nproc-per-node 2 -- cadre train --set train.init_from=<folder>: the model
             made in shards, each rank reading its own bytes of the folder.
  PyTorch    bench/big_model_peer.py (as FSDP2 users start such a run today): LlamaForCausalLM on
             the meta device, fully_shard per decoder layer and at the root, to_empty, then the
             folder's weights loaded with set_model_state_dict(full_state_dict=True,
             broadcast_from_rank0=True) (the main row: rank 0 reads the folder) or with
             torch.distributed.checkpoint's HuggingFaceStorageReader (second row); fused AdamW,
             jemalloc (LD_PRELOAD; Debian's libjemalloc2, which this script installs when missing).

Per side: time from launch until step 1 starts and step 1's time; peak RSS per rank while loading
and during training, above the process's own baseline once its libraries are imported (whole-process
figures beside); tokens/s (median of the steps after the first). Cadre's loading peak comes from a
`train.steps 0` run (its `load:` line), the training peak from the last step's peak_rss_bytes in
metrics.jsonl (before the final checkpoint, which the peer does not write) less that baseline.

Each sitting also records the machine's bf16 matmul speed on one thread (torch, 2048^3): tokens/s
from sittings on different days compare only where it agrees.

Usage: bench/big_model_start.py [--build build-torch2] [--steps 4] [--repeats 1] [--layers 8] [--keep DIR] [--tiny]
Writes bench/results/big_model_start_<layers>layers.{json,md}. ~15 minutes a repeat on 2 cores; a quiet machine.
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
from train_throughput import ensure_dataset, peer_python  # noqa: E402

SHAPE = dict(dim=2048, layers=8, heads=32, kv_heads=8, ffn=8192, vocab=128256)
TINY = dict(dim=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=8192)  # --tiny: a rehearsal of the script
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def sh(cmd, env=None):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"{cmd[0]} exited {proc.returncode}")
    return proc.stdout


def ensure_jemalloc():
    """The peer's allocator (Cadre has its own block cache): Debian's libjemalloc2, installed here."""
    if not os.path.exists(JEMALLOC):
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        sh(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "libjemalloc2"],
           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    return os.path.exists(JEMALLOC)


def write_folder(path, s):
    if not os.path.exists(os.path.join(path, "config.json")):
        sh([peer_python(), os.path.join(ROOT, "tests/python/hf_random_folder.py"), path, str(s["dim"]), str(s["layers"]),
            str(s["heads"]), str(s["kv_heads"]), str(s["ffn"]), str(s["vocab"]), "400MB", "tied", "500000"])
    return path


def cadre_cmd(args, hf, data, run_dir, steps):
    # No model keys: every one comes from the folder's config.json (train.init_from).
    config = os.path.join(os.path.dirname(run_dir), "big_model.yaml")
    with open(config, "w") as f:
        f.write("model:\n  arch: llama\n")
    cmd = [args.cadre, "run", "--nproc-per-node", "2", "--log-dir", os.path.join(run_dir, "logs"), "--",
           args.cadre, "train", "--config", config]
    for s in [f"train.init_from={hf}", f"data.dir={data}", f"run.dir={run_dir}", f"train.steps={steps}",
              "train.threads=1", "train.eval_interval=0", "train.log_interval=1",
              "data.batch_size=1", "optim.warmup_steps=0", "checkpoint.interval=0", "checkpoint.keep=1",
              "parallel.strategy=FULL_SHARD", "parallel.activation_checkpointing=true",
              "parallel.mixed_precision.param_dtype=bfloat16", "parallel.mixed_precision.reduce_dtype=float32"]:
        cmd += ["--set", s]
    return cmd


def mib_after(text, pattern):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else float("nan")


def cadre_side(args, hf, data, work, tag):
    """Cadre's figures: a load-only run (train.steps 0), then the training run (fresh run directories)."""
    for d in (f"cadre-load-{tag}", f"cadre-train-{tag}"):
        shutil.rmtree(os.path.join(work, d), ignore_errors=True)
    load = sh(cadre_cmd(args, hf, data, os.path.join(work, f"cadre-load-{tag}"), 0))
    base = mib_after(load, r"\[rank 0\].*MiB \(([0-9.e+]+) MiB before the model\)")
    load_peak = mib_after(load, r"\[rank 0\].*peak RSS ([0-9.e+]+) MiB")
    run_dir = os.path.join(work, f"cadre-train-{tag}")
    launched = time.time()
    sh(cadre_cmd(args, hf, data, run_dir, args.steps))
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    events = [json.loads(line) for line in open(os.path.join(run_dir, "events.jsonl"))]
    step1_start = next(e["time"] for e in events if e["event"] == "start")  # logged as the first step begins
    # Rank 0's VmHWM at the last step, before the final checkpoint's staging (the peer saves none).
    train_peak = rows[-1]["peak_rss_bytes"] / 2**20
    return dict(launch_to_step1_s=step1_start - launched, step1_s=rows[0]["step_time_s"],
                load_peak_mib=load_peak - base, load_peak_whole_mib=load_peak,
                train_peak_mib=train_peak - base, train_peak_whole_mib=train_peak, baseline_mib=base,
                tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows[1:]),
                losses=[r["loss"] for r in rows])


def peer_side(args, hf, data, work, loader):
    out = os.path.join(work, f"peer-{loader}.json")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if os.path.exists(JEMALLOC):
        env["LD_PRELOAD"] = JEMALLOC
    env["BENCH_LAUNCHED"] = repr(time.time())
    sh([peer_python(), os.path.join(ROOT, "bench/big_model_peer.py"), "--hf", hf, "--data", data, "--steps",
        str(args.steps), "--loader", loader, "--out", out], env=env)
    return json.load(open(out))


# The machine's bf16 GEMM speed on one thread (what each rank has), through the peer's torch: the
# figure that tells a slower machine from a slower build when sittings are compared across days.
MATMUL_PEAK = """
import json, time, torch
torch.set_num_threads(1)
a, b = torch.randn(2048, 2048).bfloat16(), torch.randn(2048, 2048).bfloat16()
a @ b
best = 1e30
for _ in range(5):
    t0 = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t0)
print(json.dumps(dict(bf16_gflops_1_thread=2 * 2048 ** 3 / best / 1e9)))
"""


def matmul_peak():
    out = subprocess.run([peer_python(), "-c", MATMUL_PEAK], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["bf16_gflops_1_thread"]


def ratio(a, b):
    return a / b if b else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build-torch2"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--keep", help="work directory (the folder is written once and reused)")
    p.add_argument("--tiny", action="store_true", help="a 0.6M-parameter model: checks the script, not a figure")
    p.add_argument("--layers", type=int, default=SHAPE["layers"],
                   help="decoder layers of the 1B shape (8: ~0.75B parameters, the issue's; fewer where 2 ranks "
                        "of 8 do not fit the machine)")
    args = p.parse_args()
    args.cadre = os.path.join(args.build, "bin", "cadre")
    work = args.keep or tempfile.mkdtemp(prefix="cadre-big-model-")
    os.makedirs(work, exist_ok=True)
    shape = TINY if args.tiny else dict(SHAPE, layers=args.layers)
    hf = write_folder(os.path.join(work, "hf-tiny" if args.tiny else f"hf-{shape['layers']}"), shape)
    data = ensure_dataset(args.cadre)
    ensure_jemalloc()
    sittings = []
    for k in range(args.repeats):
        sittings.append(dict(matmul_peak_bf16_gflops=matmul_peak(),
                             cadre=cadre_side(args, hf, data, work, k),
                             fsdp2=peer_side(args, hf, data, work, "broadcast"),
                             fsdp2_dcp=peer_side(args, hf, data, work, "dcp"),
                             jemalloc=os.path.exists(JEMALLOC)))
    keys = ["launch_to_step1_s", "step1_s", "load_peak_mib", "train_peak_mib", "tokens_per_s"]
    med = {side: {key: statistics.median(s[side][key] for s in sittings) for key in keys}
           for side in ("cadre", "fsdp2", "fsdp2_dcp")}
    result = dict(shape=shape, steps=args.steps, sittings=sittings, median=med)
    out = os.path.join(ROOT, "bench/results", "big_model_start_tiny" if args.tiny else
                       f"big_model_start_{shape['layers']}layers")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(result, open(out + ".json", "w"), indent=1)
    lines = ["| figure | Cadre | FSDP2 (broadcast from rank 0) | ratio | FSDP2 (DCP HF reader) | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    for key in keys:
        c, b, d = med["cadre"][key], med["fsdp2"][key], med["fsdp2_dcp"][key]
        lines.append(f"| {key} | {c:.2f} | {b:.2f} | {ratio(c, b):.2f} | {d:.2f} | {ratio(c, d):.2f} |")
    peaks = ", ".join(f"{s['matmul_peak_bf16_gflops']:.0f}" for s in sittings)
    lines.append(f"\n{args.repeats} sitting(s), medians; jemalloc for the peer: {sittings[0]['jemalloc']}; "
                 f"bf16 matmul peak on one thread (torch, 2048^3) per sitting: {peaks} GFLOP/s")
    text = "\n".join(lines)
    open(out + ".md", "w").write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
