"""References for Cadre's image pipeline (tests/data/image_pipeline_parity_test.cpp), from PyPI's
Pillow and torchvision in the project venv. Usage: image_pipeline_ref.py <dir>.

Writes into <dir>: test images generated now (JPEGs at 4:2:0, 4:2:2 and 4:4:4 and PNGs, of
several sizes; files.txt lists them), and refs.pt with
  decoded.<i>.<d>  Pillow's decode of file i at 1/d (draft() for JPEGs, the path the loader takes
                   when it decodes in the DCT domain), uint8 HWC
  eval.<i>.<d>     transforms.v2 Resize(R, antialias) -> CenterCrop(S) -> Normalize on decoded.<i>.<d>
  crop.<i>         transforms.v2.functional.resized_crop(decoded.<i>.1, box <i>, S) -> Normalize
  box.<i>          that box (top, left, height, width)
  rrc.<H>x<W>.scale / .ratio   10,000 torchvision RandomResizedCrop.get_params boxes (seed 0):
                   area share and aspect ratio
  config           R, S, mean, std
"""
import os
import sys

import numpy as np
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import v2

R, S = 64, 56
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
FILES = [  # name, width, height, JPEG subsampling (None: PNG)
    ("a.jpg", 500, 375, 2), ("b.jpg", 375, 500, 0), ("c.jpg", 131, 97, 1), ("d.jpeg", 257, 203, 2),
    ("e.png", 320, 240, None), ("f.png", 65, 90, None)]
RRC_SHAPES = [(375, 500), (500, 375), (64, 400)]  # (H, W); the last often falls back to the clamped centre box


def image(w, h, rng):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([127 + 120 * np.sin(x / 7.0), 127 + 120 * np.cos(y / 5.0), 127 + 120 * np.sin((x + y) / 11.0)], -1)
    return Image.fromarray(np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8), "RGB")


def pillow_decode(path, d):
    im = Image.open(path)
    w, h = im.size
    if d > 1:
        im.draft("RGB", (w // d, h // d))
        want = ((w + d - 1) // d, (h + d - 1) // d)
        assert im.size == want, f"{path}: draft at 1/{d} gave {im.size}, expected {want}"
    return torch.from_numpy(np.asarray(im.convert("RGB")).copy())


def normalized(x):  # uint8 HWC -> float CHW in [0, 1]
    return v2.ToDtype(torch.float32, scale=True)(x.permute(2, 0, 1).contiguous())


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(0)
    refs = {"config": torch.tensor([R, S] + MEAN + STD, dtype=torch.float64)}
    names = []
    eval_tf = v2.Compose([v2.Resize(R, antialias=True), v2.CenterCrop(S), v2.Normalize(MEAN, STD)])
    for i, (name, w, h, sub) in enumerate(FILES):
        path = os.path.join(out, name)
        im = image(w, h, rng)
        if sub is None:
            im.save(path)
        else:
            im.save(path, quality=85, subsampling=sub)
        names.append(name)
        for d in ([1, 2, 4, 8] if sub is not None else [1]):
            dec = pillow_decode(path, d)
            refs[f"decoded.{i}.{d}"] = dec
            refs[f"eval.{i}.{d}"] = eval_tf(normalized(dec))
        full = refs[f"decoded.{i}.1"]
        H, W = full.shape[0], full.shape[1]
        box = [H // 7, W // 5, max(1, H * 3 // 5), max(1, W * 2 // 3)]
        refs[f"box.{i}"] = torch.tensor(box, dtype=torch.int64)
        crop = v2.functional.resized_crop(normalized(full), *box, [S, S], antialias=True)
        refs[f"crop.{i}"] = v2.Normalize(MEAN, STD)(crop)
    torch.manual_seed(0)
    for H, W in RRC_SHAPES:
        img = torch.zeros(3, H, W)
        scale, ratio = [], []
        for _ in range(10000):
            _, _, h, w = T.RandomResizedCrop.get_params(img, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
            scale.append(h * w / (H * W))
            ratio.append(w / h)
        refs[f"rrc.{H}x{W}.scale"] = torch.tensor(scale, dtype=torch.float64)
        refs[f"rrc.{H}x{W}.ratio"] = torch.tensor(ratio, dtype=torch.float64)
    with open(os.path.join(out, "files.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    torch.save(refs, os.path.join(out, "refs.pt"))
    print(f"ok: {len(names)} images, Pillow {Image.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
