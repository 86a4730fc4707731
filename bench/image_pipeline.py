"""Images/s decoded and augmented at 224x224 (RandomResizedCrop, horizontal flip, normalise)
from ImageNet-sized JPEGs (generated 500x375, quality 90, 4:2:0): Cadre's loader
(`cadre bench images`, C++ decode threads) against torchvision's DataLoader with PIL
(ImageFolder, transforms.RandomResizedCrop/RandomHorizontalFlip/ToTensor/Normalize) on the same
folder with the same number of workers. Prints both, per core, the ratio, and how many cores of
Cadre's loader one GPU training ResNet-50 consumes, from NVIDIA's published figure.

Usage: ~/.cache/cadre/venv/bin/python bench/image_pipeline.py [--build build] [--workers 2]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

# NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "Training
# performance: NVIDIA DGX A100 (8x A100 80GB)": 1 GPU, mixed precision, 2470 img/s (pytorch-21.03).
GPU_IMAGES_PER_S = 2470
GPU_SOURCE = "NVIDIA DeepLearningExamples ResNet50 v1.5 (PyTorch), 1x A100 80GB, mixed precision"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def torchvision_rate(folder, workers, batch, batches):
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(folder, transform=tf)
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, persistent_workers=True,
                        worker_init_fn=lambda _: torch.set_num_threads(1))
    it = iter(loader)
    next(it)  # workers started, first batch out
    done, start = 0, time.perf_counter()
    while done < batches:
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
            continue
        done += 1
    return batch * batches / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs of each; medians are reported")
    a = p.parse_args()
    cadre = os.path.join(a.build, "bin", "cadre")
    if not os.access(cadre, os.X_OK):
        sys.exit(f"image_pipeline: no cadre binary at {cadre} (build it, or pass --build)")
    with tempfile.TemporaryDirectory(prefix="cadre-image-bench-") as tmp:
        folder, data = os.path.join(tmp, "folder"), os.path.join(tmp, "data")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_image_folder.py"), "--out", folder,
                        "--classes", "4", "--per-class", str(a.images // 4), "--sizes", "500x375", "--png-share", "0"],
                       check=True)
        subprocess.run([cadre, "data", "prepare", "--images", "--input", folder, "--out", data], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ours_runs, theirs_runs = [], []
        for _ in range(a.repeats):  # interleaved, so both see the same load (shared machines drift)
            out = subprocess.run([cadre, "bench", "images", "--data", data, "--workers", str(a.workers), "--batch",
                                  str(a.batch), "--batches", str(a.batches)], check=True, capture_output=True, text=True)
            ours_runs.append(json.loads(out.stdout.strip().splitlines()[-1])["images_per_s"])
            theirs_runs.append(torchvision_rate(folder, a.workers, a.batch, a.batches))
        ours, theirs = statistics.median(ours_runs), statistics.median(theirs_runs)
    per_core, peer_per_core = ours / a.workers, theirs / a.workers
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {a.workers} workers; "
          f"224x224 from 500x375 JPEGs; {a.batch * a.batches} images timed per run; medians of {a.repeats} "
          f"interleaved runs (Cadre {', '.join(f'{r:.0f}' for r in ours_runs)}; "
          f"torchvision {', '.join(f'{r:.0f}' for r in theirs_runs)})")
    print("| loader | images/s | images/s per core |")
    print("|---|---|---|")
    print(f"| Cadre (TurboJPEG + DCT scaling, C++ threads) | {ours:.0f} | {per_core:.0f} |")
    print(f"| torchvision DataLoader + PIL | {theirs:.0f} | {peer_per_core:.0f} |")
    print(f"ratio Cadre / torchvision: {ours / theirs:.2f}x (goal >= 2x)")
    print(f"one GPU training ResNet-50 consumes {GPU_IMAGES_PER_S} images/s ({GPU_SOURCE}): "
          f"{GPU_IMAGES_PER_S / per_core:.1f} cores of Cadre's loader, {GPU_IMAGES_PER_S / peer_per_core:.1f} of torchvision's")


if __name__ == "__main__":
    main()
