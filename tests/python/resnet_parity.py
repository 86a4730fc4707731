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
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

STAGES = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


class Reference(ResNet):
    """torchvision's ResNet with the stage widths, input channels and stem set from the case.
    Only the constructor differs: its blocks, _make_layer and forward are torchvision's."""

    def __init__(self, depth, width, in_channels, num_classes, stem):
        nn.Module.__init__(self)
        block = Bottleneck if depth >= 50 else BasicBlock
        self._norm_layer = nn.BatchNorm2d
        self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
        small = stem == "small"
        k, s = (3, 1) if small else (7, 2)
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=k, stride=s, padding=k // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if small else nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        layers = STAGES[depth]
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)


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
