"""Runs Cadre's ResNet parity case through torchvision's ResNet (Debian's python3-torchvision).

Usage: resnet_parity.py <case_dir>. Reads case.json (depth, width, in_channels, num_classes,
stem) and inputs.pt (images, labels, param.<name>, buffer.<name> with torchvision's names),
builds torchvision's ResNet with those widths and stem, and writes outputs.pt: train-mode
logits, loss and every gradient (grad.<name>), the BatchNorm statistics after that forward
(after.<name>), and eval-mode logits.
"""
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from resnet_ref import Reference  # noqa: E402


def main(case_dir):
    torch.set_num_threads(1)
    case = json.load(open(os.path.join(case_dir, "case.json")))
    inputs = torch.load(os.path.join(case_dir, "inputs.pt"))
    model = Reference(case["depth"], case["width"], case["in_channels"], case["num_classes"], case["stem"])
    state = {k.split(".", 1)[1]: v for k, v in inputs.items() if k.startswith(("param.", "buffer."))}
    model.load_state_dict(state, strict=True)  # raises on any missing or unexpected name

    out = {}
    model.train()
    logits = model(inputs["images"])
    loss = nn.functional.cross_entropy(logits, inputs["labels"])
    loss.backward()
    out["logits"] = logits.detach().clone()
    out["loss"] = loss.detach().clone()
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().clone()
    for name, b in model.named_buffers():
        out["after." + name] = b.detach().clone()
    model.eval()
    with torch.no_grad():
        out["eval_logits"] = model(inputs["images"]).clone()
    torch.save(out, os.path.join(case_dir, "outputs.pt"))
    print("ok: torchvision", len(out), "tensors")


if __name__ == "__main__":
    main(*sys.argv[1:])
