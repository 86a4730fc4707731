"""Helpers for the tests that use the real `transformers` as the Llama reference
(hf_export_check.py, hf_sharded_folder.py): loading a folder in float32 or float64, the float64
run's exact rotary tables, one-ulp perturbed float32 runs, greedy decoding with transformers'
KV cache and the float64 check that each greedy step is clear of a tie."""
import math

import torch
from transformers import DynamicCache, LlamaForCausalLM

# A greedy step must be clear of a tie by more than float32 rounding can move two logits: a
# float32 forward of these models is within ~4e-7 of float64 relative to the largest logit
# (tests/models/llama_parity_test.cpp measures the architecture on every kernel choice tried),
# so two float32 forwards can order the top two differently only when closer than ~1e-6.
MIN_GREEDY_GAP = 1e-5


def exact_inv_freq(model):
    """The model's RoPE inverse frequencies in float64, scaled as its rope_parameters say
    (default, linear, llama3: transformers' formulas), checked against transformers' own float32
    ones so that this float64 version is the same function, not another reading of it."""
    cfg = model.config
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rope = cfg.rope_parameters
    inv = rope["rope_theta"] ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        inv = inv / rope["factor"]
    elif kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        original = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (original / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv / factor + smooth * inv
        scaled = torch.where(wavelen > original / low, inv / factor, inv)
        medium = (wavelen >= original / high) & (wavelen <= original / low)
        inv = torch.where(medium, blended, scaled)
    else:
        assert kind == "default", f"no float64 RoPE for rope_type {kind}"
    theirs = model.model.rotary_emb.inv_freq.double()
    # float32 pow and the scaling arithmetic: a few float32 roundings; a wrong formula is off by far more.
    assert torch.allclose(inv, theirs, rtol=1e-6, atol=0), (kind, inv, theirs)
    assert getattr(model.model.rotary_emb, "attention_scaling", 1.0) == 1.0, "a scaled attention needs its factor here"
    return inv


def exact_rotary(model):
    """Makes the model's rotary tables float64. transformers computes them in float32 even for a
    float64 model, which would build float32 rounding into the float64 reference."""
    inv = exact_inv_freq(model)

    def forward(x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    model.model.rotary_emb.forward = forward


def load(hf_dir, dtype):
    """LlamaForCausalLM from a folder, every tensor accounted for (no missing, unexpected or
    mismatched one), in eval mode; float64 with exact rotary tables."""
    model, info = LlamaForCausalLM.from_pretrained(hf_dir, dtype=dtype, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    assert not bad, f"transformers could not load every tensor of {hf_dir}: {bad}"
    if dtype == torch.float64:
        exact_rotary(model)
    return model.eval()


def moved_one_ulp(model, seed):
    """Each float32 weight moved to its next float up or down, the direction drawn per element (a
    float32 run equals an exact run on inputs perturbed by a few roundings, so such runs sample
    the spread of float32 error rather than one run's luck)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():  # a tied head is one parameter: moved once
            up = torch.rand(p.shape, generator=gen) < 0.5
            p.copy_(torch.where(up, torch.nextafter(p, torch.full_like(p, float("inf"))),
                                torch.nextafter(p, torch.full_like(p, float("-inf")))))
    return model


def float32_runs(hf_dir, tokens, runs):
    """Logits of `runs` float32 runs: the weights as stored, then runs-1 one-ulp perturbations."""
    out = []
    with torch.no_grad():
        for k in range(runs):
            model = load(hf_dir, torch.float32)
            if k:
                moved_one_ulp(model, k)
            logits = model(input_ids=tokens).logits
            assert logits.dtype == torch.float32
            out.append(logits)
    return out


def greedy(model, prompt, steps):
    """Greedy decoding with transformers' KV cache: the prompt once, then one token per step."""
    cache = DynamicCache(config=model.config)
    out = []
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True).logits
        for _ in range(steps):
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            logits = model(input_ids=torch.tensor([[nxt]]), cache=cache, use_cache=True).logits
    return out


def greedy_gap(exact, prompt, tokens):
    """(the smallest float64 top-1/top-2 gap over the steps relative to the largest logit,
    whether float64's argmax is the given token at every step), from one full float64 forward."""
    seq = torch.tensor([prompt + tokens[:-1]])
    with torch.no_grad():
        logits = exact(input_ids=seq).logits[0, len(prompt) - 1:]
    top2 = logits.topk(2, dim=-1)
    same = torch.equal(top2.indices[:, 0], torch.tensor(tokens))
    return float(((top2.values[:, 0] - top2.values[:, 1]) / logits.abs().max()).min()), same
