"""Writes a Hugging Face Llama folder with the real `transformers` (LlamaForCausalLM's
save_pretrained; transformers 5 pinned in python/requirements-torch.txt), without Cadre's code:
config.json as transformers 5 writes it (`rope_parameters`, no top-level rope_theta), the
weights in two safetensors files with model.safetensors.index.json, in bfloat16 or float16.
Then runs transformers on the weights as stored and saves what Cadre must reproduce:

  hf_sharded_folder.py <out_dir> <variant> <prompt_ids> <steps>

variant "bf16_gqa_untied": bfloat16, grouped-query attention, untied head, rope_theta 5e5,
    plus a rotary_emb.inv_freq tensor added to the first file as transformers before 4.3x
    saved it (Cadre must ignore it);
variant "f16_tied": float16, full attention, tied head (save_pretrained leaves lm_head out),
    rope_theta 10000 in rope_parameters, and num_key_value_heads removed from config.json
    (transformers' default, num_attention_heads, applies);
variant "bf16_llama3": bfloat16, grouped-query attention, untied head, Llama 3.1's RoPE scaling
    (rope_type llama3, theta 5e5, factor 8, low/high frequency factors 1 and 4) with an original
    context of 64 so that the tokens' positions reach every band (kept, blended, divided), and
    config.json rewritten in the spelling of Llama 3.1's hub config (top-level rope_theta and
    rope_scaling, no rope_parameters), which transformers 5 still reads.
<prompt_ids>: comma-separated token ids; the greedy continuation of <steps> tokens is computed
with transformers' KV cache, each step checked in float64 to be clear of a tie by far more than
float32 rounding. Saves <out_dir>/reference.pt: tokens; logits (float32, the weights as stored),
ref.logits (float64 run), ulp<k>.logits (float32 runs from weights moved by one ulp, k <
ulp_runs) for tests/models/fp64_judge.h's rule; greedy_prompt and greedy_tokens.
"""
import glob
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
from transformers_ref import MIN_GREEDY_GAP, float32_runs, greedy, greedy_gap, load  # noqa: E402

ULP_RUNS = 4


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def write_folder(out_dir, variant):
    bf16 = variant != "f16_tied"
    dtype = torch.bfloat16 if bf16 else torch.float16
    rope = LLAMA3_ROPE if variant == "bf16_llama3" else {"rope_type": "default",
                                                          "rope_theta": 500000.0 if bf16 else 10000.0}
    config = LlamaConfig(hidden_size=64, intermediate_size=168, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2 if bf16 else 4, vocab_size=512, max_position_embeddings=128,
                         rms_norm_eps=1e-6, rope_parameters=dict(rope),
                         tie_word_embeddings=not bf16, bos_token_id=1, eos_token_id=2, hidden_act="silu")
    torch.manual_seed(1234)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 / p.shape[1] ** 0.5 if "embed_tokens" not in name else 1.0))
    model.to(dtype)
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    model.save_pretrained(out_dir, max_shard_size=int(total * 0.6))
    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(out_dir, "*.safetensors")))
    assert len(files) == 2, f"save_pretrained wrote {files}, expected two files"
    index_path = os.path.join(out_dir, "model.safetensors.index.json")
    index = json.load(open(index_path))
    assert ("lm_head.weight" in index["weight_map"]) == bf16, sorted(index["weight_map"])

    cfg_path = os.path.join(out_dir, "config.json")
    cfg = json.load(open(cfg_path))
    # What the first two variants are about: transformers 5 writes rope_parameters, not rope_theta.
    assert "rope_theta" not in cfg and cfg["rope_parameters"]["rope_theta"] == config.rope_parameters["rope_theta"], cfg
    if variant == "bf16_llama3":
        # Llama 3.1's hub spelling: rope_theta top-level, the scaling in rope_scaling.
        scaling = dict(cfg.pop("rope_parameters"))
        cfg["rope_theta"] = scaling.pop("rope_theta")
        cfg["rope_scaling"] = scaling
        json.dump(cfg, open(cfg_path, "w"), indent=2)
    elif bf16:
        name = "model.layers.0.self_attn.rotary_emb.inv_freq"
        first = index["weight_map"]["model.layers.0.self_attn.q_proj.weight"]
        tensors = load_file(os.path.join(out_dir, first))
        tensors[name] = (1.0 / (500000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))).to(dtype)
        save_file(tensors, os.path.join(out_dir, first), metadata={"format": "pt"})
        index["weight_map"][name] = first
        json.dump(index, open(index_path, "w"), indent=2)
    else:
        del cfg["num_key_value_heads"]
        json.dump(cfg, open(cfg_path, "w"), indent=2)
    return files, len(index["weight_map"])


def main(out_dir, variant, prompt_ids, steps):
    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    assert variant in ("bf16_gqa_untied", "f16_tied", "bf16_llama3"), variant
    files, count = write_folder(out_dir, variant)

    # The reference: transformers on the weights as stored (bf16/f16 values, exact in float32).
    tokens = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(5))
    runs = float32_runs(out_dir, tokens, ULP_RUNS)
    exact = load(out_dir, torch.float64)
    with torch.no_grad():
        ref = exact(input_ids=tokens).logits
    prompt = [int(t) for t in prompt_ids.split(",")]
    model = load(out_dir, torch.float32)
    seq = greedy(model, prompt, int(steps))
    gap, same = greedy_gap(exact, prompt, seq)
    assert same, "float32 greedy differs from float64"
    assert gap > MIN_GREEDY_GAP, f"a greedy step is within rounding of a tie (gap {gap:.2e}): choose another seed"
    out = {"tokens": tokens, "logits": runs[0], "ref.logits": ref, "ulp_runs": torch.tensor(ULP_RUNS),
           "greedy_prompt": torch.tensor(prompt), "greedy_tokens": torch.tensor(seq)}
    for k in range(1, ULP_RUNS):
        out["ulp%d.logits" % k] = runs[k]
    torch.save(out, os.path.join(out_dir, "reference.pt"))
    print(f"ok: {variant}: transformers {transformers.__version__} save_pretrained wrote {count} tensors in {files}; "
          f"greedy continuation {seq} (smallest float64 top-2 gap {gap:.2e})")


if __name__ == "__main__":
    main(*sys.argv[1:])
