"""Runs Cadre's parity case through the Python reference Llama (python/llama_ref.py) on the
project venv's PyTorch 2.x (torch pinned in python/requirements-torch.txt), in float64 (the exact answer Cadre and PyTorch are judged by) and in float32 (PyTorch's own error,
the yardstick for Cadre's).

Usage: llama_parity.py <case_dir>. Reads case.json (model config, optimizer settings) and
inputs.pt (weights as param.<name>, tokens), writes outputs.pt with the logits, loss,
gradients (grad.<name>), the gradient norm before clipping at each AdamW step (grad_norms) and
the parameters after N AdamW steps (after.<name>) of these runs:
  <name>        float32, the given weights;
  ref.<name>    float64, the same model, weights and tokens;
  ulp<k>.<name> float32, k = 1..ULP_RUNS-1, each weight moved by one ulp up or down (random
                signs, seed k). A float32 run equals an exact run on inputs perturbed by a few
                units of rounding, so these sample the spread of float32 error on this case. A
                single run understates it after AdamW steps: where a gradient is near Adam's eps,
                m/(sqrt(v)+eps) amplifies its rounding, and one run's error there is a matter of
                luck (one tensor's error measured to vary 17x between OpenBLAS kernels).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from llama_ref import Llama, loss_fn, make_adamw  # noqa: E402

# float32 runs in all. Against the largest error of 8, Cadre's measured at most 1.32x over 60
# combinations of BLAS, ATen and oneDNN kernels; against a single run's, up to 8.5x.
ULP_RUNS = 8


def run(case, state, tokens, dtype):
    """Forward, backward and N clipped AdamW steps of the reference model in `dtype`."""
    model = Llama(case["model"])
    # Weights are float32 values, exact in float64; load_state_dict copies into the model's dtype.
    # The rotary tables stay the float32-rounded ones (llama_ref.py and Cadre both round them
    # once), so the float64 run computes exactly what the float32 runs approximate.
    model.to(dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    x, y = tokens[:, :-1], tokens[:, 1:]

    out = {}
    logits = model(x)
    loss = loss_fn(logits, y)
    assert logits.dtype == dtype and loss.dtype == dtype, (logits.dtype, loss.dtype)
    loss.backward()
    out["logits"] = logits.detach().clone()
    out["loss"] = loss.detach().clone()
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().clone()

    o = case["optim"]
    opt = make_adamw(model, o["lr"], (o["beta1"], o["beta2"]), o["eps"], o["weight_decay"])
    norms = []
    for step in range(o["steps"]):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])))
        opt.step()
    for name, p in model.named_parameters():
        out["after." + name] = p.detach().clone()
    out["grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    return out


def moved_one_ulp(state, seed):
    """Each float32 weight moved to its next float up or down, the direction drawn per element."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, w in state.items():
        up = torch.rand(w.shape, generator=gen) < 0.5
        out[name] = torch.where(up, torch.nextafter(w, torch.full_like(w, float("inf"))),
                                torch.nextafter(w, torch.full_like(w, float("-inf"))))
    return out


def run_case(case_dir, run):
    """`run(case, state, tokens, dtype)` on the case's inputs in float32, float64 and the one-ulp
    float32 runs; outputs.pt gets them all. Returns how many tensors it wrote."""
    torch.set_num_threads(1)
    case = json.load(open(os.path.join(case_dir, "case.json")))
    inputs = torch.load(os.path.join(case_dir, "inputs.pt"))
    state = {k[len("param."):]: v for k, v in inputs.items() if k.startswith("param.")}
    out = run(case, state, inputs["tokens"], torch.float32)
    for name, t in run(case, state, inputs["tokens"], torch.float64).items():
        out["ref." + name] = t
    for k in range(1, ULP_RUNS):
        for name, t in run(case, moved_one_ulp(state, k), inputs["tokens"], torch.float32).items():
            out["ulp%d.%s" % (k, name)] = t
    out["ulp_runs"] = torch.tensor(ULP_RUNS)
    torch.save(out, os.path.join(case_dir, "outputs.pt"))
    return len(out)


def main(case_dir):
    count = run_case(case_dir, run)
    print(f"ok: torch {torch.__version__}: {count} tensors from {ULP_RUNS} float32 runs and a float64 run")


if __name__ == "__main__":
    main(sys.argv[1])
