"""Runs Cadre's ResNet parity case through torchvision's ResNet (PyPI's torchvision in the project
venv, pinned in python/requirements-torch.txt), in
float64 (the exact answer Cadre and PyTorch are judged by) and in float32 (PyTorch's own error,
the yardstick for Cadre's).

Usage: resnet_parity.py <case_dir>. Reads case.json (depth, width, in_channels, num_classes,
stem) and inputs.pt (images, labels, param.<name>, buffer.<name> with torchvision's names),
builds torchvision's ResNet with those widths and stem, and writes outputs.pt: train-mode
logits, loss and every gradient (grad.<name>), the BatchNorm statistics after that forward
(after.<name>), and eval-mode logits, of these runs:
  <name>        float32, the given weights, buffers and images;
  ref.<name>    float64, the same (float32 values are exact in float64);
  ulp<k>.<name> float32, k = 1..ULP_RUNS-1, each weight and image moved by one ulp up or down
                (random signs, seed k): a float32 run equals an exact run on inputs perturbed by
                a few units of rounding, so these sample the spread of float32 error on this
                case rather than one run's luck.
"""
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from resnet_ref import Reference  # noqa: E402

# float32 runs in all. Fewer than llama_parity.py's 8: no optimizer steps amplify rounding here,
# and Cadre calls the same ATen kernels as torchvision (ratio measured <= 1.0 against one run).
# More than one for tensors that are pure rounding noise: the r50 case's bn1.bias gradient is
# zero in exact arithmetic (float64 gives 2e-14), float32 gives noise of 6e-6.
ULP_RUNS = 4


def moved_one_ulp(t, gen):
    """A float32 tensor with each element moved to its next float up or down."""
    up = torch.rand(t.shape, generator=gen) < 0.5
    return torch.where(up, torch.nextafter(t, torch.full_like(t, float("inf"))),
                       torch.nextafter(t, torch.full_like(t, float("-inf"))))


def run(case, state, images, labels, dtype):
    model = Reference(case["depth"], case["width"], case["in_channels"], case["num_classes"], case["stem"])
    model.load_state_dict(state, strict=True)  # raises on any missing or unexpected name
    model.to(dtype)  # floating parameters and buffers only; num_batches_tracked stays an integer

    out = {}
    model.train()
    logits = model(images.to(dtype))
    loss = nn.functional.cross_entropy(logits, labels)
    assert logits.dtype == dtype and loss.dtype == dtype, (logits.dtype, loss.dtype)
    loss.backward()
    out["logits"] = logits.detach().clone()
    out["loss"] = loss.detach().clone()
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().clone()
    for name, b in model.named_buffers():
        out["after." + name] = b.detach().clone()
    model.eval()
    with torch.no_grad():
        out["eval_logits"] = model(images.to(dtype)).clone()
    return out


def main(case_dir):
    torch.set_num_threads(1)
    case = json.load(open(os.path.join(case_dir, "case.json")))
    inputs = torch.load(os.path.join(case_dir, "inputs.pt"))
    state = {k.split(".", 1)[1]: v for k, v in inputs.items() if k.startswith(("param.", "buffer."))}
    images, labels = inputs["images"], inputs["labels"]

    out = run(case, state, images, labels, torch.float32)
    for name, t in run(case, state, images, labels, torch.float64).items():
        out["ref." + name] = t
    for k in range(1, ULP_RUNS):
        gen = torch.Generator().manual_seed(k)
        # Weights and images move; the BatchNorm statistics too, being inputs of the eval forward.
        moved = {n: moved_one_ulp(v, gen) if v.is_floating_point() else v for n, v in state.items()}
        for name, t in run(case, moved, moved_one_ulp(images, gen), labels, torch.float32).items():
            out["ulp%d.%s" % (k, name)] = t
    out["ulp_runs"] = torch.tensor(ULP_RUNS)
    torch.save(out, os.path.join(case_dir, "outputs.pt"))
    import torchvision
    print(f"ok: torchvision {torchvision.__version__} (torch {torch.__version__}): {len(out)} tensors")


if __name__ == "__main__":
    main(*sys.argv[1:])
