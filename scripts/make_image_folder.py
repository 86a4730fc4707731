#!/usr/bin/env python3
"""Writes a synthetic ImageFolder (root/<class>/<n>.jpg|png) that a small ResNet can learn:
class k is a sinusoidal grating at angle 180*k/C degrees tinted with a class colour, with a
random phase, frequency, brightness and noise per image, at sizes drawn from --sizes, as JPEG
(4:2:0) and PNG. Used by `make vision`, bench/image_pipeline.py and the tests. Needs Pillow and
NumPy (Debian's python3-pil and python3-numpy, or the project venv)."""
import argparse
import colorsys
import os
import sys

import numpy as np
from PIL import Image


def class_image(k, classes, height, width, rng):
    angle = np.pi * k / classes
    freq = rng.uniform(3.0, 6.0) / min(height, width)  # cycles per pixel
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    wave = 0.5 + 0.5 * np.sin(2 * np.pi * freq * (x * np.cos(angle) + y * np.sin(angle)) + rng.uniform(0, 2 * np.pi))
    tint = np.array(colorsys.hsv_to_rgb(k / classes, 0.6, 1.0), dtype=np.float32)
    light = rng.uniform(0.6, 1.0)
    img = 255.0 * light * (0.25 + 0.75 * wave[..., None] * tint[None, None, :])
    img += rng.normal(0, 8.0, size=img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--per-class", type=int, default=50)
    p.add_argument("--sizes", default="500x375,375x500,333x250,160x120",
                   help="WxH choices, comma separated")
    p.add_argument("--png-share", type=float, default=0.25, help="share of images written as PNG")
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.classes < 2 or a.per_class < 1:
        sys.exit("make_image_folder: --classes must be >= 2 and --per-class >= 1")
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    rng = np.random.default_rng(a.seed)
    total = 0
    for k in range(a.classes):
        d = os.path.join(a.out, f"class_{k:03d}")
        os.makedirs(d, exist_ok=True)
        for i in range(a.per_class):
            w, h = sizes[rng.integers(len(sizes))]
            im = class_image(k, a.classes, h, w, rng)
            if rng.uniform() < a.png_share:
                im.save(os.path.join(d, f"{i:05d}.png"))
            else:
                im.save(os.path.join(d, f"{i:05d}.jpg"), quality=a.quality, subsampling=2)
            total += 1
    print(f"make_image_folder: {total} images, {a.classes} classes in {a.out}")


if __name__ == "__main__":
    main()
