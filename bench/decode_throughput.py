#!/usr/bin/env python3
"""Decode throughput, Cadre vs Python PyTorch, side by side in one run.

The demo model's shape (configs/small.yaml: dim 512, 8 layers, 8 heads, vocabulary 8192, 35.7M
parameters; seeded random weights unless --model names a Hugging Face folder, e.g. the demo's
export runs/demo/hf), written once as a Hugging Face folder that both sides load. For 1, 8 and 32
concurrent streams: 16-token prompts prefilled, then 64 greedy decoding steps; tokens/s over the
decoding steps, same threads on both sides (1 and 2), rounds alternating the two sides. Cadre runs its
KV-cache decoder (bench/decode_bench.cpp); the peers run under the venv's PyTorch 2.x
(bench/python_decode_peer.py), jemalloc preloaded: transformers' generate with its static cache
and the forward compiled by torch.compile, and a KV-cache token loop on python/llama_ref.py
(preallocated caches, eager); the ratio's peer is the faster of the two in each round (issue #55:
the strongest decode path). transformers' generate with its default cache and no compile, what a
user gets without trying, is a reference column. Also checks that all pick the same greedy tokens
for stream 0 (the compiled path's bf16 kernels may round apart late in a long greedy run).

Usage: bench/decode_throughput.py [--build build] [--threads 1,2] [--model HF_DIR] [--dtypes float32,bfloat16]
                                  [--rounds 3]
Writes bench/results/decode_throughput.{json,md}.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(__file__))
import hf_io  # noqa: E402
import llama_ref  # noqa: E402
from big_model_start import JEMALLOC, ensure_jemalloc  # noqa: E402
from train_throughput import peer_python  # noqa: E402

SMALL = {"dim": 512, "n_layers": 8, "n_heads": 8, "n_kv_heads": 8, "vocab_size": 8192, "ffn_dim": 1536,
         "max_seq_len": 256, "norm_eps": 1e-5, "rope_theta": 10000.0, "tie_embeddings": False}


def write_model(out_dir):
    torch.manual_seed(0)
    model = llama_ref.Llama(SMALL)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    state = {hf_io.hf_name(k): v for k, v in model.state_dict().items()}
    hf_io.write_llama_folder(out_dir, hf_io.llama_config_json(SMALL, torch.float32), state, torch.float32,
                             lambda name: "model.safetensors")
    return out_dir


def run(cmd, env=None):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def peer_torch_version():
    return subprocess.run([peer_python(), "-c", "import torch; print(torch.__version__)"], check=True,
                          stdout=subprocess.PIPE, text=True).stdout.strip()


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--model", default="")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="cadre-decode-bench-")
    model = a.model or write_model(os.path.join(tmp.name, "hf"))
    rows, loads = [], []
    peer_env = dict(os.environ, LD_PRELOAD=JEMALLOC) if ensure_jemalloc() else None
    for threads in [int(t) for t in a.threads.split(",")]:
        for dtype in a.dtypes.split(","):
            common = ["--threads", str(threads), "--tokens", str(a.tokens), "--streams", "1,8,32", "--repeats", "1",
                      "--dtype", dtype]
            # Rounds alternate the two sides, so a busy spell on the machine hits both; the table
            # has the median rate of each side and the median of the per-round ratios.
            rates = {}
            peer = [peer_python(), os.path.join(ROOT, "bench", "python_decode_peer.py"), model] + common
            for _ in range(a.rounds):
                loads.append(os.getloadavg()[0])
                cadre = run([os.path.join(ROOT, a.build, "bin", "decode_bench"), model] + common)
                generate = run(peer + ["--impl", "transformers"], env=peer_env)
                static = run(peer + ["--impl", "static"], env=peer_env)
                loop = run(peer + ["--impl", "loop"], env=peer_env)
                for c, g, st, p in zip(cadre, generate, static, loop):
                    r = rates.setdefault(c["streams"], {"cadre": [], "generate": [], "static": [], "loop": [],
                                                        "ratio": [], "agree": None})
                    r["cadre"].append(c["tokens_per_s"])
                    r["generate"].append(g["tokens_per_s"])
                    r["static"].append(st["tokens_per_s"])
                    r["loop"].append(p["tokens_per_s"])
                    r["ratio"].append(c["tokens_per_s"] / max(st["tokens_per_s"], p["tokens_per_s"]))
                    same = min(sum(x == y for x, y in zip(c["stream0_tokens"], o["stream0_tokens"]))
                               for o in (g, st, p))
                    r["agree"] = f"{same}/{len(c['stream0_tokens'])}"
            for streams, r in sorted(rates.items()):
                rows.append({"threads": threads, "dtype": dtype, "streams": streams, "cadre": median(r["cadre"]),
                             "generate": median(r["generate"]), "static": median(r["static"]),
                             "loop": median(r["loop"]), "ratio": median(r["ratio"]), "rounds": r["ratio"],
                             "greedy_agree": r["agree"]})
    lines = [f"Decode throughput, {'model ' + a.model if a.model else 'small.yaml shape (35.7M), seeded random weights'}, "
             f"16-token prompts + {a.tokens} greedy steps, median of {a.rounds} alternating rounds; "
             f"load average {min(loads):.1f}-{max(loads):.1f} during the runs"
             f"; peers: torch {peer_torch_version()}",
             "", "| threads | weights | streams | Cadre tok/s | generate, static cache + torch.compile tok/s | "
             "PyTorch KV-cache loop tok/s | Cadre / the faster of the two | reference: generate, default cache tok/s | "
             "greedy tokens equal (stream 0, all four) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['threads']} | {r['dtype']} | {r['streams']} | {r['cadre']:.0f} | {r['static']:.0f} | "
                     f"{r['loop']:.0f} | {r['ratio']:.2f}x | {r['generate']:.0f} | {r['greedy_agree']} |")
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "decode_throughput.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(ROOT, "bench", "results", "decode_throughput.json"), "w") as f:
        json.dump({"rows": rows, "load_averages": loads}, f, indent=1)


if __name__ == "__main__":
    main()
