"""Loads Cadre's PEFT export of a LoRA run with the real `peft` onto the real `transformers` model
of its base (PyPI, pinned in python/requirements-torch.txt), without Cadre's code, and checks
that it reproduces Cadre's logits.

Usage: lora_export_check.py <base_hf_dir> <peft_dir> <cadre_logits.pt> <rank> <alpha>
- adapter_config.json says LORA, CAUSAL_LM, r and lora_alpha as the run had them, and target
  modules; adapter_model.safetensors (metadata format=pt) holds lora_A [r, in] and lora_B [out, r]
  under PEFT's names (base_model.model.<module>.lora_A.weight);
- PeftModel.from_pretrained puts every file tensor into the model, each adapter parameter equal
  to its file value, and adds no adapter the file does not hold (one PEFT would initialise);
- its float32 logits for Cadre's tokens are judged against a float64 run of the same model as
  hf_export_check.py judges a plain export: Cadre's error at most FACTOR x the largest of PEFT's
  float32 runs' (the given weights and 3 one-ulp perturbations), floored at FLOOR.
Prints "ok: ..." with the figures and exits 0, or raises naming the first difference.
"""
import json
import os
import sys

import peft
import torch
from peft import PeftModel
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(__file__))
from hf_export_check import FACTOR, FLOOR, ULP_RUNS, rel_err  # noqa: E402
from transformers_ref import load, moved_one_ulp  # noqa: E402


def file_tensors(peft_dir):
    with safe_open(f"{peft_dir}/adapter_model.safetensors", framework="pt") as f:
        assert (f.metadata() or {}).get("format") == "pt", "metadata: transformers and peft need format=pt"
        return {n: f.get_tensor(n) for n in f.keys()}


def adapted(base_dir, peft_dir, dtype, tensors):
    """The base in `dtype` with the adapter loaded, every adapter parameter checked against the file."""
    model = PeftModel.from_pretrained(load(base_dir, dtype), peft_dir).eval()
    mine = {n.replace(".default", ""): p for n, p in model.named_parameters() if ".lora_" in n}
    assert sorted(mine) == sorted(tensors), (f"PEFT's adapter parameters {sorted(set(mine) ^ set(tensors))[:4]} "
                                             "are not the file's")
    for n, p in mine.items():
        assert p.dtype == dtype, (n, p.dtype)
        assert torch.equal(p.detach().to(tensors[n].dtype), tensors[n]), f"{n}: not the file's value"
    return model


def main(base_dir, peft_dir, cadre_path, rank, alpha):
    torch.set_num_threads(2)
    cfg = json.load(open(f"{peft_dir}/adapter_config.json"))
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
    assert cfg["r"] == int(rank) and float(cfg["lora_alpha"]) == float(alpha), cfg
    tensors = file_tensors(peft_dir)
    for n, t in tensors.items():
        assert n.startswith("base_model.model.model.layers."), n
        assert t.shape[0 if ".lora_A." in n else 1] == int(rank), (n, t.shape)
    cadre = torch.load(cadre_path, weights_only=True)
    tokens, cadre_logits = cadre["tokens"], cadre["logits"]
    with torch.no_grad():
        ref = adapted(base_dir, peft_dir, torch.float64, tensors)(input_ids=tokens).logits
        runs = []
        for k in range(ULP_RUNS):
            model = adapted(base_dir, peft_dir, torch.float32, tensors)
            if k:
                moved_one_ulp(model, k)
            runs.append(model(input_ids=tokens).logits)
        base_logits = load(base_dir, torch.float32)(input_ids=tokens).logits
    torch_err = max(rel_err(r, ref)[0] for r in runs)
    cadre_err, scale = rel_err(cadre_logits, ref)
    ratio = cadre_err / max(torch_err, FLOOR)
    assert ratio <= FACTOR, (f"logits: Cadre's float32 error {cadre_err:.2e} of |ref| {scale:.3g} is more than "
                             f"{FACTOR}x PEFT's {torch_err:.2e} (floor {FLOOR:.2e}): ratio {ratio:.2f}")
    moved, _ = rel_err(base_logits, ref)
    assert moved > 100 * max(torch_err, FLOOR), f"the adapters barely move the logits ({moved:.2e}): nothing is tested"
    print(f"ok: peft {peft.__version__} (torch {torch.__version__}) loaded {len(tensors)} adapter tensors "
          f"(target_modules {cfg['target_modules']}); logits vs float64: Cadre {cadre_err:.2e}, PEFT {torch_err:.2e} "
          f"of |ref| {scale:.3g}, ratio {ratio:.2f} (<= {FACTOR:.0f}); the adapters move the base's logits by {moved:.2e}")


if __name__ == "__main__":
    main(*sys.argv[1:])
