"""Loads Cadre's Hugging Face export with the real `transformers` and `safetensors` (PyPI, pinned
in python/requirements-torch.txt), without Cadre's code, and checks that it reproduces Cadre's
logits and greedy tokens.

Usage: hf_export_check.py <hf_dir> <model.pt> <cadre_logits.pt> [<cadre_greedy.json>]
- safetensors reads model.safetensors (names, dtypes, shapes; metadata format=pt); the .pt export
  read with torch.load (weights_only, torch 2.x's default) holds the same tensors bit for bit;
- LlamaForCausalLM.from_pretrained loads the folder with no missing, unexpected or mismatched
  tensor (a tied head when config.json says so) and its float32 logits for Cadre's tokens are
  judged against a float64 run of the same transformers model (fp64 judge below);
- with <cadre_greedy.json> ({"prompt_tokens": [...], "tokens": [...]} from `cadre generate
  --greedy --json`): transformers' greedy decoding with its KV cache from the same prompt picks
  the same tokens, each step clear of a tie in float64 by more than float32 rounding can move.

The fp64 judge (tests/models/fp64_judge.h has the reasoning and measurements): with err(x) the
largest |x - float64 result| over the float64 result's largest magnitude, Cadre's float32 error
must be at most FACTOR x the largest of transformers' float32 errors (from the given weights and
from weights moved by one ulp each), floored at FLOOR. The float64 run is transformers' model in
float64 with the rotary tables computed in float64 (transformers computes them in float32 even
for a float64 model, which would build float32 rounding into the reference).
Prints "ok: ..." with the figures and exits 0, or raises naming the first difference.
"""
import json
import os
import sys

import safetensors
import torch
import transformers
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(__file__))
from transformers_ref import MIN_GREEDY_GAP, float32_runs, greedy, greedy_gap, load  # noqa: E402

FACTOR = 4.0
FLOOR = 4 * 2.0 ** -24  # 4 float32 unit roundoffs of the magnitude
ULP_RUNS = 4            # transformers' float32 runs: the given weights and 3 one-ulp perturbations


def rel_err(x, ref):
    scale = ref.abs().max()
    return float((x.double() - ref).abs().max() / scale), float(scale)


def check_tensors(hf_dir, pt_path, cfg):
    with safe_open(f"{hf_dir}/model.safetensors", framework="pt") as f:
        names = sorted(f.keys())
        meta = f.metadata() or {}
        dtypes = {f.get_slice(n).get_dtype() for n in names}
        st = {n: f.get_tensor(n) for n in names}
    assert meta.get("format") == "pt", f"metadata {meta}: transformers needs format=pt"
    assert dtypes == {"F32"}, dtypes
    assert ("lm_head.weight" in st) == (not cfg["tie_word_embeddings"]), names
    pt = torch.load(pt_path, weights_only=True)
    assert sorted(pt) == names, (sorted(pt), names)
    for n in names:
        assert pt[n].dtype == st[n].dtype and torch.equal(pt[n], st[n]), f"{n}: the .pt export differs"
    return len(names)


def main(hf_dir, pt_path, cadre_path, greedy_path=None):
    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    cfg = json.load(open(f"{hf_dir}/config.json"))
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", cfg
    n = check_tensors(hf_dir, pt_path, cfg)

    cadre = torch.load(cadre_path, weights_only=True)
    tokens, cadre_logits = cadre["tokens"], cadre["logits"]
    exact = load(hf_dir, torch.float64)
    with torch.no_grad():
        ref = exact(input_ids=tokens).logits
    errs = [rel_err(logits, ref)[0] for logits in float32_runs(hf_dir, tokens, ULP_RUNS)]
    cadre_err, scale = rel_err(cadre_logits, ref)
    torch_err = max(errs)
    ratio = cadre_err / max(torch_err, FLOOR)
    assert ratio <= FACTOR, (f"logits: Cadre's float32 error {cadre_err:.2e} of |ref| {scale:.3g} is more than "
                             f"{FACTOR}x transformers' {torch_err:.2e} (floor {FLOOR:.2e}): ratio {ratio:.2f}")
    line = (f"ok: transformers {transformers.__version__} (torch {torch.__version__}, safetensors "
            f"{safetensors.__version__}) loaded {n} tensors{' with a tied head' if cfg['tie_word_embeddings'] else ''}; "
            f"logits vs float64: Cadre {cadre_err:.2e}, transformers {torch_err:.2e} of |ref| {scale:.3g}, "
            f"ratio {ratio:.2f} (<= {FACTOR:.0f})")
    if greedy_path:
        g = json.load(open(greedy_path))
        prompt, want = g["prompt_tokens"], g["tokens"]
        got = greedy(load(hf_dir, torch.float32), prompt, len(want))
        gap, same = greedy_gap(exact, prompt, want)
        matched = sum(a == b for a, b in zip(got, want))
        assert got == want, f"greedy tokens differ: transformers {got}, Cadre {want} ({matched} of {len(want)} equal)"
        assert same, "float64's greedy choice differs from the float32 ones"
        assert gap > MIN_GREEDY_GAP, f"a greedy step is within rounding of a tie (gap {gap:.2e}): choose another prompt"
        line += f"; greedy {matched} of {len(want)} tokens equal (smallest float64 top-2 gap {gap:.2e})"
    print(line)


if __name__ == "__main__":
    main(*sys.argv[1:])
