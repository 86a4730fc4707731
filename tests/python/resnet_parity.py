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
                case rather than one run's luck;
  cond.grad.<name>  float64, each parameter gradient's condition magnitude: the same sum over
                the batch and positions with every term replaced by its absolute value (see
                condition_magnitudes).
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


def condition_magnitudes(model, images, labels):
    """Every parameter gradient of a convolution, BatchNorm or linear layer is a sum over the
    batch (and positions) of products of the layer's input and the gradient arriving at its
    output, dy. A float32 evaluation of such a sum, in whatever order a kernel picks, errs by up
    to a few unit roundoffs of the sum of its terms' magnitudes, not of its result: where the
    terms cancel (a BatchNorm bias gradient is sum(dy), nearly zero after the next BatchNorm) the
    error relative to the result is large and depends on the summation order. This returns, per
    gradient, that sum of magnitudes, in float64: conv weight: the weight gradient of |x| and
    |dy|; BatchNorm: sum |dy * x_hat| and sum |dy|; linear: |dy|^T |x| and sum |dy|."""
    seen = {}

    def keep(name, module):
        def hook(_, inputs, out):
            out.register_hook(lambda g: seen.__setitem__(name, (module, inputs[0].detach(), g.detach())))
        return hook

    for m in model.modules():
        if isinstance(m, nn.ReLU):
            m.inplace = False  # a tensor hook needs the output that autograd saw, not one overwritten in place
    handles = [m.register_forward_hook(keep(n, m)) for n, m in model.named_modules()
               if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear))]
    model.train()
    nn.functional.cross_entropy(model(images), labels).backward()
    for h in handles:
        h.remove()
    cond = {}
    for name, (m, x, dy) in seen.items():
        if isinstance(m, nn.Conv2d):
            cond[name + ".weight"] = torch.nn.grad.conv2d_weight(x.abs(), m.weight.shape, dy.abs(), m.stride,
                                                                 m.padding, m.dilation, m.groups)
        elif isinstance(m, nn.BatchNorm2d):
            mean = x.mean(dim=(0, 2, 3), keepdim=True)
            var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
            x_hat = (x - mean) / torch.sqrt(var + m.eps)
            cond[name + ".weight"] = (dy * x_hat).abs().sum(dim=(0, 2, 3))
            cond[name + ".bias"] = dy.abs().sum(dim=(0, 2, 3))
        else:
            cond[name + ".weight"] = dy.abs().t() @ x.abs()
            cond[name + ".bias"] = dy.abs().sum(dim=0)
    for name, p in model.named_parameters():
        assert name in cond and cond[name].shape == p.shape, (name, cond.get(name))
    return cond


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
    model = Reference(case["depth"], case["width"], case["in_channels"], case["num_classes"], case["stem"])
    model.load_state_dict(state, strict=True)
    for name, t in condition_magnitudes(model.to(torch.float64), images.to(torch.float64), labels).items():
        out["cond.grad." + name] = t
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
