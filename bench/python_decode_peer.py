#!/usr/bin/env python3
"""The Python peer of bench/decode_bench.cpp: a KV-cache decoder written on python/llama_ref.py's
modules, as a PyTorch user would write one (preallocated caches, inference mode, one forward
per step for all streams), on the same Hugging Face folder, with the same prompts, greedy
tokens and timing rules (decoding steps only, median of --repeats after a warm-up run).

  python_decode_peer.py <hf_dir> [--threads 2] [--prompt-len 16] [--tokens 128]
                        [--streams 1,8,32] [--dtype float32|bfloat16] [--repeats 3]
                        [--impl loop|transformers|static]
--impl transformers times Hugging Face's LlamaForCausalLM.generate (greedy, its own KV cache)
instead: PyTorch's own decoding, what a user would pick. Its decoding steps are timed as
generate(N new tokens) - generate(1 new token), the prefill and set-up cancelling out.
--impl static: the same generate with its static cache (cache_implementation="static") and the
forward compiled by torch.compile, transformers' fastest decoding path; its static cache is sized
by the length asked (two lengths would be two compiled graphs), so its decoding steps are timed
by a streamer's clock within one generate, after a first generate that compiles.
Prints one JSON object per stream count.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import hf_io  # noqa: E402
import llama_ref  # noqa: E402


class CachedDecoder:
    """llama_ref.Llama with a key/value cache per layer: [batch, kv_heads, max_len, head_dim]."""

    def __init__(self, model, batch, max_len, dtype):
        self.m = model
        cfg = model.cfg
        self.hd = cfg["dim"] // cfg["n_heads"]
        self.rep = cfg["n_heads"] // cfg["n_kv_heads"]
        shape = (batch, cfg["n_kv_heads"], max_len, self.hd)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in model.layers]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in model.layers]
        self.head = model.tok_embeddings.weight if model.output is None else model.output.weight

    def forward(self, tokens, pos):
        """tokens [B, T] at positions pos..pos+T-1 -> next-token logits of the last position [B, vocab]."""
        B, T = tokens.shape
        x = self.m.tok_embeddings(tokens)
        cos, sin = self.m.cos[pos:pos + T].to(x.dtype), self.m.sin[pos:pos + T].to(x.dtype)
        mask = torch.full((T, pos + T), float("-inf")).triu(pos + 1) if T > 1 else None
        for i, layer in enumerate(self.m.layers):
            a = layer.attention
            h = layer.attention_norm(x)
            q = a.wq(h).view(B, T, a.n_heads, self.hd).transpose(1, 2)
            k = a.wk(h).view(B, T, a.n_kv, self.hd).transpose(1, 2)
            v = a.wv(h).view(B, T, a.n_kv, self.hd).transpose(1, 2)
            q = q * cos + llama_ref.rotate_half(q) * sin
            k = k * cos + llama_ref.rotate_half(k) * sin
            self.k[i][:B, :, pos:pos + T] = k
            self.v[i][:B, :, pos:pos + T] = v
            keys, values = self.k[i][:B, :, :pos + T], self.v[i][:B, :, :pos + T]
            if self.rep > 1:
                keys, values = keys.repeat_interleave(self.rep, 1), values.repeat_interleave(self.rep, 1)
            scores = (q @ keys.transpose(-2, -1)) / math.sqrt(self.hd)
            if mask is not None:
                scores = scores + mask
            probs = F.softmax(scores.float(), dim=-1).type_as(q)
            x = x + a.wo((probs @ values).transpose(1, 2).reshape(B, T, -1))
            x = x + layer.feed_forward(layer.ffn_norm(x))
        return F.linear(self.m.norm(x[:, -1]), self.head).float()


def prompt_token(stream, t, vocab):
    return (1 + 131 * stream + 31 * t) % vocab


def prompts_for(B, prompt_len, vocab):
    return torch.tensor([[prompt_token(s, t, vocab) for t in range(prompt_len)] for s in range(B)])


def time_static(a, dtype, streams):
    """Greedy tokens/s of generate with the static cache and a compiled forward, per stream count."""
    from transformers import LlamaForCausalLM
    from transformers.generation.streamers import BaseStreamer

    class Clock(BaseStreamer):  # generate calls put() with the prompt, then once per new token
        def __init__(self):
            self.times = []

        def put(self, value):
            self.times.append(time.perf_counter())

        def end(self):
            pass

    model = LlamaForCausalLM.from_pretrained(a.hf_dir, dtype=dtype).eval()
    model.generation_config.cache_implementation = "static"
    model.forward = torch.compile(model.forward)
    vocab = model.config.vocab_size
    with torch.inference_mode():
        for B in streams:
            prompts = prompts_for(B, a.prompt_len, vocab)
            rates = []
            for rep in range(a.repeats + 1):  # run 0 compiles for this batch
                clock = Clock()
                out = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                                     max_new_tokens=a.tokens, min_new_tokens=a.tokens, pad_token_id=0, streamer=clock)
                assert len(clock.times) == a.tokens + 1, len(clock.times)
                if rep > 0:  # the steps after the first new token
                    rates.append(B * (a.tokens - 1) / (clock.times[-1] - clock.times[1]))
            rates.sort()
            print(json.dumps({"impl": "static", "dtype": a.dtype, "streams": B, "threads": a.threads,
                              "tokens_per_s": rates[len(rates) // 2],
                              "stream0_tokens": out[0, a.prompt_len:].tolist()}), flush=True)


def time_transformers(a, dtype, streams):
    """Greedy tokens/s of transformers' generate over the decoding steps, per stream count."""
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(a.hf_dir, dtype=dtype).eval()
    vocab = model.config.vocab_size

    def generate(prompts, new_tokens):
        t0 = time.perf_counter()
        out = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0)
        return time.perf_counter() - t0, out

    with torch.inference_mode():
        for B in streams:
            prompts = prompts_for(B, a.prompt_len, vocab)
            rates = []
            for rep in range(a.repeats + 1):  # run 0 warms up
                first, _ = generate(prompts, 1)
                total, out = generate(prompts, a.tokens)
                if rep > 0:
                    rates.append(B * (a.tokens - 1) / (total - first))
            rates.sort()
            print(json.dumps({"impl": "transformers", "dtype": a.dtype, "streams": B, "threads": a.threads,
                              "tokens_per_s": rates[len(rates) // 2],
                              "stream0_tokens": out[0, a.prompt_len:].tolist()}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--impl", choices=["loop", "transformers", "static"], default="loop")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = torch.bfloat16 if a.dtype == "bfloat16" else torch.float32
    streams = [int(s) for s in a.streams.split(",")]
    if a.impl == "transformers":
        return time_transformers(a, dtype, streams)
    if a.impl == "static":
        return time_static(a, dtype, streams)
    cfg, state = hf_io.read_llama_folder(a.hf_dir)
    model = llama_ref.Llama(cfg)
    model.load_state_dict(state, strict=True)
    model = model.to(dtype).eval()
    decoder = CachedDecoder(model, max(streams), a.prompt_len + a.tokens, dtype)
    V = cfg["vocab_size"]
    with torch.inference_mode():
        for B in streams:
            rates = []
            for rep in range(a.repeats + 1):  # run 0 warms up
                prompts = prompts_for(B, a.prompt_len, V)
                nxt = decoder.forward(prompts, 0).argmax(-1)
                stream0 = [int(nxt[0])]
                t0 = time.perf_counter()
                for step in range(1, a.tokens):
                    nxt = decoder.forward(nxt.view(B, 1), a.prompt_len + step - 1).argmax(-1)
                    stream0.append(int(nxt[0]))
                seconds = time.perf_counter() - t0
                if rep > 0:
                    rates.append(B * (a.tokens - 1) / seconds)
            rates.sort()
            print(json.dumps({"impl": "python", "dtype": a.dtype, "streams": B, "threads": a.threads,
                              "tokens_per_s": rates[len(rates) // 2], "stream0_tokens": stream0}), flush=True)


if __name__ == "__main__":
    main()
