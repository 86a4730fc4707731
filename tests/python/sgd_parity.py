"""torch.optim.SGD (PyPI's torch in the project venv) on the parameters and gradients Cadre's SGD
was given, for sgd_parity_test.cpp.

Usage: sgd_parity.py <case_dir>... (one Python start for all cases). Each holds case.json (momentum, dampening, nesterov, weight_decay,
lrs: one learning rate per step, decay: per parameter whether it decays) and inputs.pt
(param<i>: initial values, grad<s>.<i>: the gradient of parameter i at step s). Parameters
that do not decay go into a second param group with weight_decay 0, as torchvision's
references split normalisation parameters. Writes outputs.pt with the parameters and momentum
buffers after the last step (p<i>, buf<i>) of these runs:
  <name>        float32, the given values;
  ref.<name>    float64, the same (float32 values are exact in float64);
  ulp<k>.<name> float32, k = 1..ULP_RUNS-1, with every initial value and gradient moved by one
                ulp in a random direction: the spread of float32 error on this case.
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


def run(case, params, grads, dtype):
    ps = [p.clone().to(dtype) for p in params]
    decay = [p for p, d in zip(ps, case["decay"]) if d]
    no_decay = [p for p, d in zip(ps, case["decay"]) if not d]
    groups = [g for g in ({"params": decay, "weight_decay": case["weight_decay"]},
                          {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
    # foreach=False: the single-tensor loop (what CPU tensors get by default) in every version.
    opt = torch.optim.SGD(groups, lr=case["lrs"][0], momentum=case["momentum"], dampening=case["dampening"],
                          nesterov=case["nesterov"], foreach=False)
    for step, lr in enumerate(case["lrs"]):
        for group in opt.param_groups:
            group["lr"] = lr
        for i, p in enumerate(ps):
            p.grad = grads[step][i].to(dtype)
        opt.step()
    out = {}
    for i, p in enumerate(ps):
        out["p%d" % i] = p.detach().clone()
        state = opt.state[p]
        if case["momentum"] != 0:
            out["buf%d" % i] = state["momentum_buffer"].clone()
    return out


def main(case_dir):
    case = json.load(open(os.path.join(case_dir, "case.json")))
    inputs = torch.load(os.path.join(case_dir, "inputs.pt"))
    n = len(case["decay"])
    params = [inputs["param%d" % i] for i in range(n)]
    grads = [[inputs["grad%d.%d" % (s, i)] for i in range(n)] for s in range(len(case["lrs"]))]
    out = run(case, params, grads, torch.float32)
    for name, t in run(case, params, grads, torch.float64).items():
        out["ref." + name] = t
    for k in range(1, ULP_RUNS):
        gen = torch.Generator().manual_seed(k)
        moved_params = [moved_one_ulp(p, gen) for p in params]
        moved_grads = [[moved_one_ulp(g, gen) for g in step] for step in grads]
        for name, t in run(case, moved_params, moved_grads, torch.float32).items():
            out["ulp%d.%s" % (k, name)] = t
    out["ulp_runs"] = torch.tensor(ULP_RUNS)
    torch.save(out, os.path.join(case_dir, "outputs.pt"))
    print(f"ok: torch.optim.SGD (torch {torch.__version__}): {len(out)} tensors")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for case_dir in sys.argv[1:]:
        main(case_dir)
