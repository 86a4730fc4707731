"""Reference Llama in PyTorch (Python), written independently of Cadre's C++ model.

Used as the numerical reference in tests (parity of logits, loss, gradients and AdamW steps, on
the project venv's PyTorch 2.x: tests/python/llama_parity.py) and as the performance peer in
bench/ (on Debian's PyTorch 1.13); it runs on both. Same architecture and parameter names as Cadre's
models/llama: RMSNorm, rotary embeddings in the rotate-half layout, grouped-query causal
attention, SwiGLU MLP, tied or untied output head.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def at_least_fp32(x):
    """float32 for bfloat16/float16 compute, as Meta's reference normalises, takes softmax and
    the loss in float32; float64 stays float64, so the parity test's float64 reference run
    (tests/python/llama_parity.py) is float64 throughout."""
    return x if x.dtype == torch.float64 else x.float()


def ffn_dim(cfg):
    if cfg.get("ffn_dim", 0) > 0:
        return cfg["ffn_dim"]
    hidden = 2 * (4 * cfg["dim"]) // 3
    m = cfg.get("multiple_of", 256)
    return m * ((hidden + m - 1) // m)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = at_least_fp32(x)
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv = cfg["n_heads"], cfg["n_kv_heads"]
        self.hd = cfg["dim"] // self.n_heads
        self.wq = nn.Linear(cfg["dim"], self.n_heads * self.hd, bias=False)
        self.wk = nn.Linear(cfg["dim"], self.n_kv * self.hd, bias=False)
        self.wv = nn.Linear(cfg["dim"], self.n_kv * self.hd, bias=False)
        self.wo = nn.Linear(self.n_heads * self.hd, cfg["dim"], bias=False)
        # "sdpa": PyTorch's fused scaled_dot_product_attention (the benchmarks' peer, what a
        # PyTorch 2.x user writes); "math" (default): the reference's explicit softmax.
        self.sdpa = cfg.get("attention", "math") == "sdpa"

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
            return self.wo(out)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.hd)
        mask = torch.full((T, T), float("-inf"), device=x.device).triu(1)
        probs = F.softmax(at_least_fp32(scores) + mask, dim=-1).type_as(q)
        out = (probs @ v).transpose(1, 2).reshape(B, T, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg["dim"], ffn_dim(cfg))
        self.attention_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.ffn_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layers"])])
        self.norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.output = None if cfg.get("tie_embeddings", False) else nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)
        hd = cfg["dim"] // cfg["n_heads"]
        inv = cfg["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(cfg["max_seq_len"], dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.cos[:T].to(h.dtype), self.sin[:T].to(h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        h = self.norm(h)
        w = self.tok_embeddings.weight if self.output is None else self.output.weight
        return F.linear(h, w)


def loss_fn(logits, targets):
    return F.cross_entropy(at_least_fp32(logits.reshape(-1, logits.shape[-1])), targets.reshape(-1))


def make_adamw(model, lr, betas, eps, weight_decay):
    """AdamW with Cadre's grouping: decay on matrices, none on vectors (norms)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)
