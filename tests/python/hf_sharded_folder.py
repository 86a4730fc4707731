"""Writes a Hugging Face Llama folder the way transformers' save_pretrained lays it out, without
Cadre's code: config.json, the weights in two safetensors files written by hand (python/hf_io.py:
8-byte little-endian header length, JSON header, raw data) with model.safetensors.index.json, in
bfloat16 or float16. Then runs the reference forward (python/llama_ref.py) on the weights as
stored and saves what Cadre must reproduce:

  hf_sharded_folder.py <out_dir> <variant> <prompt_ids> <steps>

variant "bf16_gqa_untied": bfloat16, grouped-query attention, untied head, rope_theta 5e5,
    plus a rotary_emb.inv_freq buffer as older transformers versions saved it (to be ignored);
variant "f16_tied": float16, full attention, tied head (no lm_head in the files), fields
    transformers defaults (num_key_value_heads, rope_theta) left out of config.json.
<prompt_ids>: comma-separated token ids; the greedy continuation of <steps> tokens is computed
with a full forward per step (no cache), each step checked in float64 to be clear of a tie by
far more than float32 rounding. Saves <out_dir>/reference.pt with tokens, logits,
greedy_prompt and greedy_tokens.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import hf_io  # noqa: E402
import llama_ref  # noqa: E402


# Cadre must pick exactly these greedy tokens, so no choice may be within float32 rounding of a
# tie: a float32 forward of this model is within 4e-7 of float64 relative to the largest logit
# (tests/models/llama_parity_test.cpp measures the same architecture on every kernel choice
# tried), so two float32 forwards can order the top two logits differently only when they are
# closer than ~1e-6; 1e-5 leaves 10x. Checked in float64 (measured: 1.1e-2 and 0.56).
MIN_GREEDY_GAP = 1e-5


def check_greedy_margin(model, prompt, seq):
    exact = llama_ref.Llama(model.cfg)
    exact.load_state_dict(model.state_dict())
    exact.to(torch.float64).eval()
    with torch.no_grad():
        logits = exact(torch.tensor([seq[:-1]]))[0, len(prompt) - 1:]
    top2 = logits.topk(2, dim=-1)
    assert torch.equal(top2.indices[:, 0], torch.tensor(seq[len(prompt):])), "float32 greedy differs from float64"
    gap = ((top2.values[:, 0] - top2.values[:, 1]) / logits.abs().max()).min().item()
    assert gap > MIN_GREEDY_GAP, f"a greedy step is within rounding of a tie (gap {gap:.2e}): choose another seed"


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
    state = {hf_io.hf_name(k): v.detach() for k, v in model.state_dict().items()}
    config = hf_io.llama_config_json(cfg, dtype)
    config["max_position_embeddings"] = 128
    if bf16:
        inv = 1.0 / (500000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
        state["model.layers.0.self_attn.rotary_emb.inv_freq"] = inv.to(dtype)
    else:
        del config["num_key_value_heads"], config["rope_theta"]  # transformers' defaults apply
    first = lambda n: n.startswith("model.embed_tokens") or n.startswith("model.layers.0.")  # noqa: E731
    hf_io.write_llama_folder(out_dir, config, state, dtype,
                             lambda n: "model-0000%d-of-00002.safetensors" % (1 if first(n) else 2))

    model.eval()
    with torch.no_grad():
        tokens = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(5))
        logits = model(tokens)
        seq = [int(t) for t in prompt_ids.split(",")]
        prompt = list(seq)
        for _ in range(int(steps)):
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    check_greedy_margin(model, prompt, seq)
    torch.save({"tokens": tokens, "logits": logits, "greedy_prompt": torch.tensor(prompt),
                "greedy_tokens": torch.tensor(seq[len(prompt):])}, os.path.join(out_dir, "reference.pt"))
    print(f"ok: {variant}: {len(state)} tensors in 2 files, greedy continuation {seq[len(prompt):]}")


if __name__ == "__main__":
    main(*sys.argv[1:])
