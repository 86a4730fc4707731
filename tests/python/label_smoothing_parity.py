"""torch.nn.functional.cross_entropy with label_smoothing (PyPI's torch in the project venv) on the
logits and targets Cadre's classification loss was given, for label_smoothing_parity_test.cpp.

Usage: label_smoothing_parity.py <case_dir>... (one Python start for all cases). Each holds case.json (label_smoothing) and inputs.pt
(logits [B, C] float32, target [B] int64); writes outputs.pt with the mean loss and its gradient
with respect to the logits (loss, grad) of these runs:
  <name>        float32, the given logits;
  ref.<name>    float64, the same (float32 values are exact in float64);
  ulp<k>.<name> float32, k = 1..ULP_RUNS-1, the logits moved by one ulp in random directions.
"""
import json
import os
import sys

import torch

ULP_RUNS = 4


def moved_one_ulp(t, gen):
    up = torch.rand(t.shape, generator=gen) < 0.5
    return torch.where(up, torch.nextafter(t, torch.full_like(t, float("inf"))),
                       torch.nextafter(t, torch.full_like(t, float("-inf"))))


def run(logits, target, smoothing, dtype):
    x = logits.clone().to(dtype).requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(x, target, label_smoothing=smoothing)
    loss.backward()
    return {"loss": loss.detach().clone(), "grad": x.grad.clone()}


def main(case_dir):
    case = json.load(open(os.path.join(case_dir, "case.json")))
    inputs = torch.load(os.path.join(case_dir, "inputs.pt"))
    logits, target, smoothing = inputs["logits"], inputs["target"], case["label_smoothing"]
    out = run(logits, target, smoothing, torch.float32)
    for name, t in run(logits, target, smoothing, torch.float64).items():
        out["ref." + name] = t
    for k in range(1, ULP_RUNS):
        gen = torch.Generator().manual_seed(k)
        for name, t in run(moved_one_ulp(logits, gen), target, smoothing, torch.float32).items():
            out["ulp%d.%s" % (k, name)] = t
    out["ulp_runs"] = torch.tensor(ULP_RUNS)
    torch.save(out, os.path.join(case_dir, "outputs.pt"))
    print(f"ok: torch.nn.functional.cross_entropy (torch {torch.__version__}): {len(out)} tensors")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for case_dir in sys.argv[1:]:
        main(case_dir)
