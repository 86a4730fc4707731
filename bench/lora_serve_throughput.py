#!/usr/bin/env python3
"""Serving LoRA adapters beside one base (`cadre serve --lora`, issue #52): decode throughput with
4 adapters in use against the same server serving the base alone.

The model: bench/serve_throughput.py's (Llama 3.2 1B's shapes, 16 layers, the SOTU tokenizer's
vocabulary, random bf16 weights). The adapters: 4 PEFT folders (adapter_config.json +
adapter_model.safetensors, written here with safetensors) of rank 16 on every projection of every
block (q, k, v, o, gate, up, down), random float32 factors.

For 8 and 32 concurrent streams (16-token prompts, greedy, --tokens new tokens each, EOS banned):
  base      `cadre serve` with the 4 adapters loaded, every request for the base;
  adapters  the same server, the requests spread round-robin over the 4 adapters, so every
            decoding step holds all four.
Both start their B requests in one step (--batch-wait-ms), 2 threads, bf16 weights; tokens/s over
the decoding steps as serve_throughput.py measures it ((wall of N tokens - wall of 1)). Sittings
alternate the two; the median and the spread (min..max) are reported, and the ratio of medians
(the goal: adapters >= 0.9 x base). The adapters' cost is Cadre's own work: each row adds its
adapter's two small products per projection (models/llama/decode_adapters.h).

Usage: bench/lora_serve_throughput.py [--build build] [--streams 8,32] [--tokens 32] [--repeats 3]
Writes bench/results/lora_serve_throughput.{json,md}. A quiet machine.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from serve_throughput import PROMPT_LEN, SHAPE, start_server, vocab_of, wall_of, write_folder  # noqa: E402
from train_throughput import ensure_dataset, peer_python, run  # noqa: E402

ADAPTERS, RANK = 4, 16
MODULES = {"self_attn": ["q_proj", "k_proj", "v_proj", "o_proj"], "mlp": ["gate_proj", "up_proj", "down_proj"]}

WRITE_ADAPTER = r"""
import json, sys, torch
from safetensors.torch import save_file
out, dim, ffn, heads, kv, layers, rank, seed = sys.argv[1], *map(int, sys.argv[2:])
hd = dim // heads
shapes = {"q_proj": (heads * hd, dim), "k_proj": (kv * hd, dim), "v_proj": (kv * hd, dim), "o_proj": (dim, heads * hd),
          "gate_proj": (ffn, dim), "up_proj": (ffn, dim), "down_proj": (dim, ffn)}
gen = torch.Generator().manual_seed(seed)
tensors = {}
for layer in range(layers):
    for block, names in (("self_attn", ["q_proj", "k_proj", "v_proj", "o_proj"]), ("mlp", ["gate_proj", "up_proj", "down_proj"])):
        for name in names:
            out_f, in_f = shapes[name]
            key = f"base_model.model.model.layers.{layer}.{block}.{name}"
            tensors[key + ".lora_A.weight"] = torch.randn(rank, in_f, generator=gen) / in_f ** 0.5
            tensors[key + ".lora_B.weight"] = torch.randn(out_f, rank, generator=gen) * 0.01
save_file(tensors, out + "/adapter_model.safetensors", metadata={"format": "pt"})
json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
           "target_modules": sorted(shapes), "bias": "none"}, open(out + "/adapter_config.json", "w"))
"""


def write_adapters(work):
    paths = []
    for k in range(ADAPTERS):
        path = os.path.join(work, f"adapter{k}")
        os.makedirs(path, exist_ok=True)
        run([peer_python(), "-c", WRITE_ADAPTER, path, str(SHAPE["dim"]), str(SHAPE["ffn"]), str(SHAPE["heads"]),
             str(SHAPE["kv_heads"]), str(SHAPE["layers"]), str(RANK), str(k + 1)])
        paths.append(path)
    return paths


def sitting(cadre, folder, adapters, B, tokens, models):
    lora = [f"a{k}={path}" for k, path in enumerate(adapters)]
    server, port = start_server(cadre, folder, B, tokens, ["--lora", *lora])
    try:
        vocab = vocab_of(folder)
        wall_of(port, B, tokens, vocab, models)  # warm-up
        one, full = wall_of(port, B, 1, vocab, models), wall_of(port, B, tokens, vocab, models)
        return B * (tokens - 1) / (full - one)
    finally:
        server.terminate()
        server.wait(60)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--streams", default="8,32")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    data = ensure_dataset(cadre)
    streams = [int(s) for s in args.streams.split(",")]
    rates = {B: {"base": [], "adapters": []} for B in streams}
    with tempfile.TemporaryDirectory(prefix="cadre-lora-serve-") as work:
        folder = write_folder(os.path.join(work, "model"), SHAPE, data)
        adapters = write_adapters(work)
        for k in range(args.repeats):
            for B in streams:
                for name, models in (("base", ["bench"]), ("adapters", [f"a{i}" for i in range(ADAPTERS)])):
                    rates[B][name].append(sitting(cadre, folder, adapters, B, args.tokens, models))
                    print(f"sitting {k + 1}: {B} streams, {name}: {rates[B][name][-1]:.1f} tokens/s", file=sys.stderr,
                          flush=True)
    result = {"streams": {}, "tokens": args.tokens, "adapters": ADAPTERS, "rank": RANK}
    lines = [f"# Serving {ADAPTERS} LoRA adapters (rank {RANK}, every projection) beside a 16-layer Llama 3.2 "
             f"1B-shaped base, bf16, 2 threads, {args.tokens} new tokens after {PROMPT_LEN}, {args.repeats} sittings, "
             f"{time.strftime('%Y-%m-%d %H:%M')}", "",
             "| streams | base alone, tokens/s | 4 adapters round-robin, tokens/s | ratio (goal >= 0.9) |",
             "|---:|---:|---:|---:|"]
    for B in streams:
        med = {n: statistics.median(v) for n, v in rates[B].items()}
        result["streams"][B] = dict(rates[B], ratio=med["adapters"] / med["base"])
        lines.append(f"| {B} | {med['base']:.1f} ({min(rates[B]['base']):.1f}..{max(rates[B]['base']):.1f}) | "
                     f"{med['adapters']:.1f} ({min(rates[B]['adapters']):.1f}..{max(rates[B]['adapters']):.1f}) | "
                     f"{med['adapters'] / med['base']:.2f}x |")
    lines += ["", "Median (min..max) over the sittings; the same server (all 4 adapters loaded) in both columns."]
    out = os.path.join(ROOT, "bench", "results", "lora_serve_throughput")
    with open(out + ".json", "w") as f:
        json.dump(result, f, indent=2)
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
