"""Writes a Hugging Face Llama folder the way transformers' save_pretrained lays it out, without
Cadre's code: config.json, the weights in two safetensors files written by hand (8-byte
little-endian header length, JSON header, raw data) with model.safetensors.index.json, in
bfloat16 or float16. Then runs the reference forward (python/llama_ref.py) on the weights as
stored and saves what Cadre must reproduce:

  hf_sharded_folder.py <out_dir> <variant> <prompt_ids> <steps>

variant "bf16_gqa_untied": bfloat16, grouped-query attention, untied head, rope_theta 5e5,
    plus a rotary_emb.inv_freq buffer as older transformers versions saved it (to be ignored);
variant "f16_tied": float16, full attention, tied head (no lm_head in the files), fields
    transformers defaults (num_key_value_heads, rope_theta) left out of config.json.
<prompt_ids>: comma-separated token ids; the greedy continuation of <steps> tokens is computed
with a full forward per step (no cache). Saves <out_dir>/reference.pt with tokens, logits,
greedy_prompt and greedy_tokens.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import llama_ref  # noqa: E402

HF_NAMES = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
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
CODES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def hf_name(name):
    if name in HF_NAMES:
        return HF_NAMES[name]
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{HF_NAMES[rest]}"


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.float32 else t.numpy().tobytes()
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


def main(out_dir, variant, prompt_ids, steps):
    torch.manual_seed(1234)
    bf16 = variant == "bf16_gqa_untied"
    dtype = torch.bfloat16 if bf16 else torch.float16
    cfg = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2 if bf16 else 4, "vocab_size": 512,
           "ffn_dim": 168, "max_seq_len": 128, "norm_eps": 1e-6, "rope_theta": 500000.0 if bf16 else 10000.0,
           "tie_embeddings": not bf16}
    model = llama_ref.Llama(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 / p.shape[1] ** 0.5 if "embeddings" not in name else 1.0))
            p.copy_(p.to(dtype).float())  # the reference runs on the values as stored
    state = {hf_name(k): v.detach().to(dtype) for k, v in model.state_dict().items()}
    os.makedirs(out_dir, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 168, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 512,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "tie_word_embeddings": not bf16,
              "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": str(dtype).split(".")[1],
              "rope_scaling": None, "attention_bias": False}
    if bf16:
        config.update({"num_key_value_heads": 2, "rope_theta": 500000.0})
        inv = 1.0 / (500000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
        state["model.layers.0.self_attn.rotary_emb.inv_freq"] = inv
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    first = {k: v for k, v in state.items() if k.startswith("model.embed_tokens") or k.startswith("model.layers.0.")}
    second = {k: v for k, v in state.items() if k not in first}
    files = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
    weight_map = {}
    for fname, part in files.items():
        write_safetensors(os.path.join(out_dir, fname), part)
        weight_map.update({k: fname for k in part})
    total = sum(v.numel() * v.element_size() for v in state.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)

    model.eval()
    with torch.no_grad():
        tokens = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(5))
        logits = model(tokens)
        seq = [int(t) for t in prompt_ids.split(",")]
        prompt = list(seq)
        for _ in range(int(steps)):
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    torch.save({"tokens": tokens, "logits": logits, "greedy_prompt": torch.tensor(prompt),
                "greedy_tokens": torch.tensor(seq[len(prompt):])}, os.path.join(out_dir, "reference.pt"))
    print(f"ok: {variant}: {len(state)} tensors in 2 files, greedy continuation {seq[len(prompt):]}")


if __name__ == "__main__":
    main(*sys.argv[1:])
