"""Loads Cadre's Hugging Face export with the real `transformers` and `safetensors` (PyPI, pinned
in python/requirements-torch.txt), without Cadre's code, and checks that it reproduces Cadre's
logits and greedy tokens.

Usage: hf_export_check.py <hf_dir> <model.pt|-> <cadre_logits.pt> [<cadre_greedy.json>]
- safetensors reads the weights (model.safetensors, or the files model.safetensors.index.json
  lists, every tensor in exactly one file, each file holding exactly the tensors the index puts
  in it, total_size their bytes; metadata format=pt), all in the dtype config.json names as
  `dtype` and `torch_dtype`; the .pt export (float32, read with torch.load, weights_only) holds the
  same tensors, equal bit for bit once rounded to that dtype (round to nearest even on both sides);
- LlamaForCausalLM.from_pretrained loads the folder with no missing, unexpected or mismatched
  tensor (a tied head when config.json says so) and its float32 logits for Cadre's tokens are
  judged against a float64 run of the same transformers model (fp64 judge below); Cadre's logits
  must come from the weights as the folder holds them;
- loaded in bfloat16 (from_pretrained(dtype=bfloat16)), every parameter is the file's bfloat16
  value (for a bfloat16 folder) and its logits are within BF16 x the float64 run's largest logit:
  a first-order sum of one bfloat16 rounding (unit roundoff 2^-8) at each point where an error
  carries forward: the embedding, four per block (attention output, residual, MLP output,
  residual) and the head;
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
BF16_UNIT = 2.0 ** -8
FLOOR = 4 * 2.0 ** -24  # 4 float32 unit roundoffs of the magnitude
ULP_RUNS = 4            # transformers' float32 runs: the given weights and 3 one-ulp perturbations


def rel_err(x, ref):
    scale = ref.abs().max()
    return float((x.double() - ref).abs().max() / scale), float(scale)


CODES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def weight_files(hf_dir):
    """{file: [tensor names]} from the index (checked) or the single file."""
    index_path = f"{hf_dir}/model.safetensors.index.json"
    if not os.path.exists(index_path):
        return {"model.safetensors": None}
    index = json.load(open(index_path))
    files = {}
    for name, file in index["weight_map"].items():
        files.setdefault(file, []).append(name)
    assert not os.path.exists(f"{hf_dir}/model.safetensors"), "both an index and model.safetensors"
    return files


def check_tensors(hf_dir, pt_path, cfg):
    assert cfg.get("dtype") == cfg.get("torch_dtype") and cfg["dtype"] in CODES, cfg
    st, total = {}, 0
    for file, listed in weight_files(hf_dir).items():
        with safe_open(f"{hf_dir}/{file}", framework="pt") as f:
            names = sorted(f.keys())
            meta = f.metadata() or {}
            assert listed is None or sorted(listed) == names, f"{file}: index {sorted(listed)}, file {names}"
            for n in names:
                assert n not in st, f"{n} in two files"
                assert f.get_slice(n).get_dtype() == CODES[cfg["dtype"]], (n, f.get_slice(n).get_dtype())
                st[n] = f.get_tensor(n)
                total += st[n].numel() * st[n].element_size()
        assert meta.get("format") == "pt", f"metadata {meta}: transformers needs format=pt"
    index_path = f"{hf_dir}/model.safetensors.index.json"
    if os.path.exists(index_path):
        assert json.load(open(index_path))["metadata"]["total_size"] == total, "total_size"
    names = sorted(st)
    assert ("lm_head.weight" in st) == (not cfg["tie_word_embeddings"]), names
    if pt_path == "-":  # no .pt export to compare with (a model too large to write twice)
        return st
    pt = torch.load(pt_path, weights_only=True)
    assert sorted(pt) == names, (sorted(pt), names)
    for n in names:
        assert torch.equal(pt[n].to(st[n].dtype), st[n]), f"{n}: the .pt export differs"
    return st


def check_bf16(hf_dir, st, tokens, ref, layers):
    model = load(hf_dir, torch.bfloat16)
    for n, p in model.state_dict().items():
        assert p.dtype == torch.bfloat16, (n, p.dtype)
        if n in st and st[n].dtype == torch.bfloat16:
            assert torch.equal(p, st[n]), f"{n}: loaded in bfloat16, not the file's value"
    with torch.no_grad():
        err, _ = rel_err(model(input_ids=tokens).logits, ref)
    bound = (4 * layers + 2) * BF16_UNIT
    assert err <= bound, f"bfloat16 logits: error {err:.2e} of the float64 run's largest, bound {bound:.2e}"
    return f"; bfloat16 load: logits error {err:.2e} (bound {bound:.2e})"


def main(hf_dir, pt_path, cadre_path, greedy_path=None):
    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    cfg = json.load(open(f"{hf_dir}/config.json"))
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", cfg
    st = check_tensors(hf_dir, pt_path, cfg)
    n = len(st)

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
            f"ratio {ratio:.2f} (<= {FACTOR:.0f}); weights {cfg['dtype']} in {len(weight_files(hf_dir))} file(s)")
    line += check_bf16(hf_dir, st, tokens, ref, cfg["num_hidden_layers"])
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
