"""Loads Cadre's Hugging Face export without Cadre's code and checks it reproduces Cadre's logits.

Usage: hf_export_check.py <hf_dir> <model.pt> <cadre_logits.pt>
- parses model.safetensors by hand (python/hf_io.py: 8-byte header length, JSON header, raw data),
- runs a Llama forward written here from HF's field and tensor names (config.json),
- compares the logits with the ones Cadre computed for the same tokens (1e-5 relative),
- checks that the .pt export, read with torch.load, holds the same tensors.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from hf_io import read_safetensors  # noqa: E402


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def hf_llama_forward(cfg, sd, tokens):
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = d // nh
    B, T = tokens.shape
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat((ang, ang), -1)
    cos, sin = emb.cos().float(), emb.sin().float()

    def rot(x):
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat((-x2, x1), -1) * sin

    h = sd["model.embed_tokens.weight"][tokens]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, sd[p + "input_layernorm.weight"], cfg["rms_norm_eps"])
        q = (x @ sd[p + "self_attn.q_proj.weight"].T).view(B, T, nh, hd).transpose(1, 2)
        k = (x @ sd[p + "self_attn.k_proj.weight"].T).view(B, T, nkv, hd).transpose(1, 2)
        v = (x @ sd[p + "self_attn.v_proj.weight"].T).view(B, T, nkv, hd).transpose(1, 2)
        q, k = rot(q), rot(k)
        k = k.repeat_interleave(nh // nkv, 1)
        v = v.repeat_interleave(nh // nkv, 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1)
        o = (att @ v).transpose(1, 2).reshape(B, T, d)
        h = h + o @ sd[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, sd[p + "post_attention_layernorm.weight"], cfg["rms_norm_eps"])
        gate = x @ sd[p + "mlp.gate_proj.weight"].T
        up = x @ sd[p + "mlp.up_proj.weight"].T
        h = h + (F.silu(gate) * up) @ sd[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, sd["model.norm.weight"], cfg["rms_norm_eps"])
    head = sd["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else sd["lm_head.weight"]
    return h @ head.T


def main(hf_dir, pt_path, cadre_path):
    cfg = json.load(open(f"{hf_dir}/config.json"))
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", cfg
    sd = read_safetensors(f"{hf_dir}/model.safetensors")
    assert ("lm_head.weight" in sd) == (not cfg["tie_word_embeddings"]), sorted(sd)
    ref = torch.load(cadre_path)
    logits = hf_llama_forward(cfg, sd, ref["tokens"])
    want = ref["logits"]
    err = float((logits - want).abs().max() / want.abs().max())
    assert err < 1e-5, f"logits differ: max relative error {err}"
    pt = torch.load(pt_path)
    assert sorted(pt) == sorted(sd), (sorted(pt), sorted(sd))
    for name in sd:
        assert torch.equal(pt[name], sd[name]), name
    print(f"ok: {len(sd)} tensors, logits max relative error {err:.2e}")


if __name__ == "__main__":
    main(*sys.argv[1:])
