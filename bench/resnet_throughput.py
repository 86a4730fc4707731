#!/usr/bin/python3
"""Images/s of ResNet DDP on the MNIST digits: Cadre (`cadre run` + `cadre train`, NO_SHARD)
against PyTorch 2.x's (the venv's, bench/train_throughput.py peer_python) torch.nn.parallel.DistributedDataParallel over Gloo with torchvision's
ResNet (python/resnet_ref.py), 2 ranks x 1 thread each, the same model (configs/resnet_mnist.yaml),
batch, optimizer and data, side by side in one run. Each side runs `--repeats` times,
interleaved; the figure is each side's median of per-run medians over steps after the first 2.
Cadre keeps activations channels-last (model.channels_last); the peer is torchvision as a careful
PyTorch engineer runs it on a CPU (issue #55): model and input channels-last, AdamW(fused=True),
jemalloc preloaded (Cadre has its own block cache); for reference, the same peer in NCHW, as
torchvision's examples run it.

Usage: bench/resnet_throughput.py [--build build] [--steps 30] [--repeats 3]
Writes bench/results/resnet_throughput.{json,md}.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(__file__))
from resnet_ref import Reference  # noqa: E402
from big_model_start import JEMALLOC, ensure_jemalloc  # noqa: E402
from train_throughput import peer_python  # noqa: E402

CONFIG = os.path.join(ROOT, "configs", "resnet_mnist.yaml")
# The model and optimizer of configs/resnet_mnist.yaml (checked against the file below).
MODEL = dict(depth=18, width=16, in_channels=1, num_classes=10, stem="small")
BATCH, LR, BETAS, EPS, WD, CLIP = 32, 0.003, (0.9, 0.999), 1e-8, 0.05, 1.0


def load_images(data_dir):
    """The training split of a Cadre image dataset: pixels normalised as Cadre's loader does."""
    manifest = json.load(open(os.path.join(data_dir, "manifest.json")))
    shape = (manifest["channels"], manifest["height"], manifest["width"])
    per = int(np.prod(shape))
    xs, ys = [], []
    for shard in manifest["train"]:
        raw = np.fromfile(os.path.join(data_dir, shard["file"]), dtype=np.uint8)[64:].reshape(-1, per + 1)
        ys.append(raw[:, 0].astype(np.int64))
        xs.append(raw[:, 1:].reshape(-1, *shape))
    x = (np.concatenate(xs).astype(np.float32) / 255.0 - manifest["pixel_mean"]) / manifest["pixel_std"]
    return torch.from_numpy(x), torch.from_numpy(np.concatenate(ys))


def python_worker(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    images, labels = load_images(args.data)
    net = Reference(**MODEL)
    if args.channels_last:
        net = net.to(memory_format=torch.channels_last)
    model = torch.nn.parallel.DistributedDataParallel(net)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": other, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, fused=True)
    if args.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    gen = np.random.default_rng(1234 + rank)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        idx = torch.from_numpy(gen.integers(0, len(labels), BATCH))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images[idx]), labels[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print(json.dumps({"images_per_s": statistics.median(world * BATCH / t for t in times[2:]),
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


def python_rate(args, channels_last=False):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        if os.path.exists(JEMALLOC):
            env["LD_PRELOAD"] = JEMALLOC
        argv = [peer_python(), __file__, "--worker", "--data", args.data, "--steps", str(args.steps)]
        procs.append(subprocess.Popen(argv + (["--channels-last"] if channels_last else []), env=env,
                                      stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return json.loads(outs[0].strip().splitlines()[-1])


def cadre_rate(args, workdir, n):
    cadre = os.path.join(args.build, "bin", "cadre")
    run_dir = os.path.join(workdir, f"cadre-{n}")
    cmd = [cadre, "run", "--nproc-per-node", "2", "--", cadre, "train", "--config", CONFIG,
           "--set", f"data.dir={args.data}", "--set", f"run.dir={run_dir}", "--set", "train.threads=1",
           "--set", f"train.steps={args.steps}", "--set", "train.eval_interval=0", "--set", "parallel.strategy=NO_SHARD",
           "--set", "checkpoint.interval=0", "--resume", "none"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rates = [json.loads(line)["images_per_s"] for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return statistics.median(rates[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "mnist"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--channels-last", action="store_true", help="(worker) the peer's model in channels-last memory")
    args = ap.parse_args()
    if args.worker:
        return python_worker(args)
    config = open(CONFIG).read()
    for key, value in [("width", MODEL["width"]), ("batch_size", BATCH), ("lr", LR), ("weight_decay", WD)]:
        assert f"{key}: {value}" in config, f"{CONFIG} no longer has {key}: {value}; update this benchmark"
    if not os.path.exists(os.path.join(args.data, "manifest.json")):
        subprocess.run([os.path.join(args.build, "bin", "cadre"), "data", "prepare", "--images", "--input",
                        os.path.join(ROOT, "third_party", "data", "mnist"), "--out", args.data], check=True)
    jemalloc = ensure_jemalloc()
    cadre, python, python_cl = [], [], []
    with tempfile.TemporaryDirectory() as workdir:
        for n in range(args.repeats):
            cadre.append(cadre_rate(args, workdir, n))
            peer = python_rate(args)
            python.append(peer["images_per_s"])
            python_cl.append(python_rate(args, channels_last=True)["images_per_s"])
            print(f"run {n + 1}/{args.repeats}: Cadre {cadre[-1]:.0f} images/s, Python channels-last "
                  f"{python_cl[-1]:.0f} images/s, Python NCHW {python[-1]:.0f} images/s", flush=True)
    c, p, pcl = statistics.median(cadre), statistics.median(python), statistics.median(python_cl)
    result = {"model": "resnet-18 layout, width 16, small stem, 28x28x1", "build": os.path.abspath(args.build),
              "ranks": 2, "threads_per_rank": 1,
              "batch_per_rank": BATCH, "steps": args.steps, "repeats": args.repeats,
              "cadre_images_per_s": c, "python_channels_last_images_per_s": pcl, "ratio": c / pcl,
              "python_nchw_images_per_s": p, "ratio_nchw": c / p,
              "cadre_runs": cadre, "python_channels_last_runs": python_cl, "python_nchw_runs": python,
              "peer": "fused AdamW" + (", jemalloc" if jemalloc else ", glibc malloc (no jemalloc)"),
              "torch": peer["torch"]}
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "resnet_throughput.json"), "w") as f:
        json.dump(result, f, indent=2)
    table = ("| | images/s (2 ranks x 1 thread) | runs |\n|---|---:|---|\n"
             f"| Cadre DDP (NO_SHARD) | {c:.0f} | {', '.join(f'{r:.0f}' for r in cadre)} |\n"
             f"| PyTorch {peer['torch']} DDP (Gloo), torchvision ResNet, channels-last, {result['peer']} | {pcl:.0f} | "
             f"{', '.join(f'{r:.0f}' for r in python_cl)} |\n"
             f"| Cadre / Python | {c / pcl:.2f}x | |\n"
             f"| reference: the same peer in NCHW | {p:.0f} | {', '.join(f'{r:.0f}' for r in python)} |\n"
             f"| Cadre / that reference | {c / p:.2f}x | |\n")
    with open(os.path.join(ROOT, "bench", "results", "resnet_throughput.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
