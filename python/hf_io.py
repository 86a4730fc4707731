"""Hugging Face Llama folders from Python, without the safetensors package (Debian's torch 1.13,
which the benchmarks' Python peers run on, has none): the safetensors format by hand (8-byte
little-endian header length, JSON header, raw little-endian data), tensor names between Cadre's
(Meta's) and transformers', and a config.json with transformers' LlamaConfig fields.

Used only by the decode benchmark (bench/decode_throughput.py, bench/python_decode_peer.py) to
write and read the model both sides decode. It is no longer a reference in tests: they read and
write Hugging Face folders with the real safetensors and transformers (docs/REFERENCES.md).
"""
import json
import os
import struct

import torch

_LAYER = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_TOP = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight"}
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64}
CODES = {v: k for k, v in DTYPES.items()}


def hf_name(name):
    """Cadre parameter name -> transformers' name."""
    if name in _TOP:
        return _TOP[name]
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{_LAYER[rest]}"


def cadre_name(name):
    """transformers' name -> Cadre's (None for tensors Cadre does not have)."""
    for k, v in _TOP.items():
        if v == name:
            return k
    parts = name.split(".")
    if len(parts) > 3 and parts[:2] == ["model", "layers"]:
        rest = ".".join(parts[3:])
        for k, v in _LAYER.items():
            if v == rest:
                return f"layers.{parts[2]}.{k}"
    return None


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype in (torch.bfloat16, torch.float16) else t.numpy().tobytes()
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(buf, dtype=DTYPES[info["dtype"]]).reshape(info["shape"]).clone()
    return out


def llama_config_json(cfg, dtype):
    """transformers' LlamaConfig fields for a llama_ref config dict."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg["dim"],
            "intermediate_size": cfg["ffn_dim"], "num_hidden_layers": cfg["n_layers"],
            "num_attention_heads": cfg["n_heads"], "num_key_value_heads": cfg["n_kv_heads"],
            "vocab_size": cfg["vocab_size"], "max_position_embeddings": cfg["max_seq_len"],
            "rms_norm_eps": cfg["norm_eps"], "rope_theta": cfg["rope_theta"],
            "tie_word_embeddings": cfg["tie_embeddings"], "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
            "torch_dtype": str(dtype).split(".")[1], "rope_scaling": None, "attention_bias": False}


def write_llama_folder(out_dir, config, state, dtype, shards):
    """Writes config.json and `state` (HF names) in `dtype`, split into the files `shards` maps
    each tensor name to (with model.safetensors.index.json when there is more than one)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    files = {}
    for name, t in state.items():
        files.setdefault(shards(name), {})[name] = t.to(dtype)
    for fname, part in files.items():
        write_safetensors(os.path.join(out_dir, fname), part)
    if len(files) > 1:
        total = sum(t.numel() * t.element_size() for part in files.values() for t in part.values())
        weight_map = {name: fname for fname, part in files.items() for name in part}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


def read_llama_folder(hf_dir):
    """(llama_ref config dict, state dict with Cadre names, float32) of a folder."""
    c = json.load(open(os.path.join(hf_dir, "config.json")))
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    state = {}
    for fname in files:
        for name, t in read_safetensors(os.path.join(hf_dir, fname)).items():
            if cadre_name(name):
                state[cadre_name(name)] = t.float()
    cfg = {"dim": c["hidden_size"], "n_layers": c["num_hidden_layers"], "n_heads": c["num_attention_heads"],
           "n_kv_heads": c.get("num_key_value_heads", c["num_attention_heads"]), "vocab_size": c["vocab_size"],
           "ffn_dim": c["intermediate_size"], "max_seq_len": c.get("max_position_embeddings", 2048),
           "norm_eps": c.get("rms_norm_eps", 1e-6), "rope_theta": c.get("rope_theta", 10000.0),
           "tie_embeddings": c.get("tie_word_embeddings", False)}
    if cfg["tie_embeddings"]:
        state.pop("output.weight", None)
    return cfg, state
