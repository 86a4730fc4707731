#!/usr/bin/env python3
"""Serving a 1B-class Llama: `cadre serve` against transformers' generate with its static cache and
torch.compile (issue #49).

The model: Llama 3.2 1B's shapes (dim 2048, 16 layers, 32 heads, 8 kv heads, FFN 8192, tied
embeddings) with the vocabulary of the SOTU SentencePiece tokenizer (8192 pieces, `cadre data
prepare`): `cadre serve` needs a tokenizer that decodes every id the model can emit, and Llama 3's
tokenizer.json is issue #50's. 0.99B parameters (973M of them in the layers), random weights, a
bf16 folder written by transformers with the tokenizer.model beside.

For 1, 8 and 32 concurrent streams: 16-token prompts (token ids), greedy, --tokens new tokens each
(EOS banned on both sides, so every stream runs its length), bf16 weights, 2 threads on both sides.

  Cadre  `cadre serve --max-batch B --batch-wait-ms 60000` (the B requests start in one decoding
         step), the KV cache at its default budget; B concurrent HTTP requests for whole answers.
  peer   transformers' LlamaForCausalLM.generate in bf16 with its static cache
         (cache_implementation="static") and the forward compiled by torch.compile: the strongest
         CPU decode path a PyTorch user has; jemalloc (LD_PRELOAD).

Tokens/s over the decoding steps, B x (N - 1) tokens after the first, after a warm-up run (the peer
compiles then): Cadre as (wall of N new tokens - wall of 1), prefill and HTTP cancelling out; the
peer from a streamer's clock at each step of one generate (its static cache is sized by the length
asked, so two lengths would be two compiled graphs). Resident memory: the peak of the
whole process (VmHWM: the server's own, read before it stops; the peer's from wait4), one process
per stream count on each side, so each peak belongs to its B. Sittings alternate sides; the median
and the spread (min..max) of each figure are reported, never the best sitting. Each sitting also
measures the read bandwidth of 2 threads: one stream reads every weight once per token, so that
bandwidth over the weights' bytes bounds any decoder at 1 stream.

Usage: bench/serve_throughput.py [--build build] [--streams 1,8,32] [--tokens 32] [--repeats 3]
                                 [--keep DIR] [--tiny]
Writes bench/results/serve_throughput.{json,md}. A quiet machine.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from big_model_start import JEMALLOC, ensure_jemalloc  # noqa: E402
from hf_export import summary, timed  # noqa: E402
from train_throughput import ensure_dataset, peer_python, run  # noqa: E402

SHAPE = dict(dim=2048, layers=16, heads=32, kv_heads=8, ffn=8192)
TINY = dict(dim=64, layers=2, heads=4, kv_heads=2, ffn=128)  # --tiny: a rehearsal of the script
PROMPT_LEN, EOS = 16, 2

PEER = r"""
import json, sys, time
import torch
from transformers import LlamaForCausalLM
from transformers.generation.streamers import BaseStreamer
folder, B, T, P, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(2)
model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
model.generation_config.cache_implementation = "static"
model.forward = torch.compile(model.forward)
prompts = torch.tensor([[(1 + 131 * s + 31 * t) % vocab for t in range(P)] for s in range(B)])
class Clock(BaseStreamer):  # generate calls put() with the prompt, then once per step
    def __init__(self): self.times = []
    def put(self, value): self.times.append(time.perf_counter())
    def end(self): pass
def decode_rate():
    clock = Clock()
    out = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False, max_new_tokens=T,
                         min_new_tokens=T, pad_token_id=0, streamer=clock)
    assert out.shape[1] == P + T and len(clock.times) == T + 1, (out.shape, len(clock.times))
    return B * (T - 1) / (clock.times[-1] - clock.times[1])  # the steps after the first token
with torch.inference_mode():
    t0 = time.perf_counter(); decode_rate(); warm = time.perf_counter() - t0  # compiles
    rate = decode_rate()
print(json.dumps(dict(tokens_per_s=rate, warmup_s=warm, versions=[torch.__version__])))
"""


def write_folder(path, shape, data):
    """The random bf16 folder (transformers' own save_pretrained) with the data's SentencePiece model
    beside, the vocabulary its size."""
    if not os.path.exists(os.path.join(path, "config.json")):
        manifest = json.load(open(os.path.join(data, "manifest.json")))
        tokenizer, vocab = os.path.join(data, manifest["tokenizer"]), manifest["vocab_size"]
        run([peer_python(), os.path.join(ROOT, "tests/python/hf_random_folder.py"), path, str(shape["dim"]),
             str(shape["layers"]), str(shape["heads"]), str(shape["kv_heads"]), str(shape["ffn"]), str(vocab), "5GB",
             "tied", "500000"])
        shutil.copy(tokenizer, os.path.join(path, "tokenizer.model"))
    return path


def vocab_of(folder):
    return json.load(open(os.path.join(folder, "config.json")))["vocab_size"]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        answer = json.load(r)
    assert answer["usage"]["completion_tokens"] == body["max_tokens"], answer["usage"]


def wall_of(port, B, tokens, vocab, models=("bench",)):
    """Seconds from sending B requests of `tokens` new tokens each (request s for models[s % len(models)])
    to the last answer."""
    bodies = [dict(model=models[s % len(models)], prompt=[(1 + 131 * s + 31 * t) % vocab for t in range(PROMPT_LEN)],
                   max_tokens=tokens, temperature=0, logit_bias={str(EOS): -100}) for s in range(B)]
    threads = [threading.Thread(target=post, args=(port, b)) for b in bodies]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def vm_hwm(pid):
    status = open(f"/proc/{pid}/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024


def start_server(cadre, folder, B, tokens, extra=()):
    """`cadre serve` of `folder` as model "bench" whose first step waits for B requests; (process, port)."""
    server = subprocess.Popen([cadre, "serve", "--model", folder, "--model-name", "bench", "--port", "0", "--threads", "2",
                               "--max-batch", str(B),
                               "--batch-wait-ms", "60000", "--context", str(PROMPT_LEN + tokens + 1), *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    for line in server.stdout:
        if line.startswith("listening on http://127.0.0.1:"):
            port = int(line.rsplit(":", 1)[1])
            break
    if not port:
        server.kill()
        raise SystemExit("cadre serve did not start")
    threading.Thread(target=server.stdout.read, daemon=True).start()  # keep its log flowing
    return server, port


def cadre_sitting(cadre, folder, B, tokens):
    server, port = start_server(cadre, folder, B, tokens)
    try:
        vocab = vocab_of(folder)
        wall_of(port, B, tokens, vocab)  # warm-up
        one, full = wall_of(port, B, 1, vocab), wall_of(port, B, tokens, vocab)
        if full <= one:
            raise SystemExit(f"{tokens} tokens took no longer than 1 ({full:.4f} s vs {one:.4f} s): too few to time (--tokens)")
        return dict(tokens_per_s=B * (tokens - 1) / (full - one), peak_rss_mib=vm_hwm(server.pid) / 2**20)
    finally:
        server.terminate()
        server.wait(60)


def peer_sitting(folder, B, tokens):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    if os.path.exists(JEMALLOC):
        env["LD_PRELOAD"] = JEMALLOC
    _, peak, out = timed([peer_python(), "-c", PEER, folder, str(B), str(tokens), str(PROMPT_LEN), str(vocab_of(folder))],
                         env)
    r = json.loads(out.strip().splitlines()[-1])
    return dict(tokens_per_s=r["tokens_per_s"], peak_rss_mib=peak / 2**20, warmup_s=r["warmup_s"],
                versions=r["versions"])


# The machine's read bandwidth with the benchmark's 2 threads: a float32 sum over 1 GiB (far past
# any cache), median of 7. One stream reads every weight once per token, so the tokens/s no
# decoder can pass at 1 stream is this over the weights' bytes (the issue's alternative goal).
BANDWIDTH = r"""
import json, time, torch
torch.set_num_threads(2)
x = torch.ones(256 * 2**20, dtype=torch.float32)
x.sum()
times = []
for _ in range(7):
    t0 = time.perf_counter(); x.sum(); times.append(time.perf_counter() - t0)
print(json.dumps(dict(gb_per_s=x.numel() * 4 / sorted(times)[3] / 1e9)))
"""


def read_bandwidth():
    _, _, out = timed([peer_python(), "-c", BANDWIDTH], dict(os.environ, OMP_NUM_THREADS="2"))
    return json.loads(out.strip().splitlines()[-1])["gb_per_s"]


def weight_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".safetensors"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--streams", default="1,8,32")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--keep", help="work directory (the folder is written once and reused)")
    p.add_argument("--tiny", action="store_true", help="a tiny model: rehearses the script in a minute")
    args = p.parse_args()
    cadre = os.path.join(args.build, "bin", "cadre")
    ensure_jemalloc()
    shape = TINY if args.tiny else SHAPE
    work = args.keep or tempfile.mkdtemp(prefix="cadre-serve-bench-")
    os.makedirs(work, exist_ok=True)
    folder = write_folder(os.path.join(work, f"hf-{shape['layers']}x{shape['dim']}"), shape, ensure_dataset(cadre))
    streams = [int(s) for s in args.streams.split(",")]
    rows = {B: dict(cadre=[], peer=[]) for B in streams}
    bandwidth = []
    for k in range(args.repeats):
        bandwidth.append(read_bandwidth())
        for B in streams:
            rows[B]["cadre"].append(cadre_sitting(cadre, folder, B, args.tokens))
            rows[B]["peer"].append(peer_sitting(folder, B, args.tokens))
            print(f"sitting {k + 1}/{args.repeats}, {B} streams: cadre {rows[B]['cadre'][-1]}, peer {rows[B]['peer'][-1]}",
                  file=sys.stderr, flush=True)
    when = time.strftime("%Y-%m-%d %H:%M")
    result = dict(model=shape, vocab=vocab_of(folder), tokens=args.tokens, prompt=PROMPT_LEN, when=when,
                  sittings=args.repeats, rows={str(B): v for B, v in rows.items()},
                  peer_versions=rows[streams[0]]["peer"][0]["versions"])
    lines = [f"# Serving a {shape['layers']}-layer Llama 3.2 1B-shaped model (vocabulary {result['vocab']}), bf16, "
             f"2 threads, {args.tokens} new tokens after {PROMPT_LEN}, {args.repeats} sittings, {when}", "",
             "| streams | Cadre serve tokens/s | transformers generate, static cache + torch.compile | ratio | "
             "Cadre peak RSS, MiB | peer peak RSS, MiB | ratio |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for B in streams:
        c_rate, q_rate = summary(rows[B]["cadre"], "tokens_per_s"), summary(rows[B]["peer"], "tokens_per_s")
        c_rss, q_rss = summary(rows[B]["cadre"], "peak_rss_mib"), summary(rows[B]["peer"], "peak_rss_mib")
        result[f"summary_{B}"] = dict(cadre_tokens_per_s=c_rate, peer_tokens_per_s=q_rate, cadre_peak_rss_mib=c_rss,
                                      peer_peak_rss_mib=q_rss)
        lines.append(f"| {B} | {c_rate['median']:.1f} ({c_rate['min']:.1f}..{c_rate['max']:.1f}) | "
                     f"{q_rate['median']:.1f} ({q_rate['min']:.1f}..{q_rate['max']:.1f}) | "
                     f"{c_rate['median'] / q_rate['median']:.2f}x | {c_rss['median']:.0f} ({c_rss['min']:.0f}..{c_rss['max']:.0f}) | "
                     f"{q_rss['median']:.0f} ({q_rss['min']:.0f}..{q_rss['max']:.0f}) | {c_rss['median'] / q_rss['median']:.2f}x |")
    gb = statistics.median(bandwidth)
    result["read_bandwidth_gb_per_s"] = bandwidth
    result["weight_bytes"] = weight_bytes(folder)
    lines.append(f"\nMedian (min..max) over the sittings; torch {result['peer_versions'][0]}. Read bandwidth, 2 threads "
                 f"(a float32 sum over 1 GiB): {gb:.1f} GB/s ({min(bandwidth):.1f}..{max(bandwidth):.1f}); reading the "
                 f"{result['weight_bytes'] / 1e9:.2f} GB of weights once per token bounds 1 stream at "
                 f"{gb * 1e9 / result['weight_bytes']:.2f} tokens/s.")
    text = "\n".join(lines)
    print(text)
    if not args.tiny:
        out = os.path.join(ROOT, "bench/results/serve_throughput")
        json.dump(result, open(out + ".json", "w"), indent=1)
        open(out + ".md", "w").write(text + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
