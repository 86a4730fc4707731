"""Runs Cadre's parity case through the Python reference Llama (python/llama_ref.py).

Usage: llama_parity.py <case_dir>. Reads case.json (model config, optimizer settings) and
inputs.pt (weights as param.<name>, tokens), writes outputs.pt with the logits, loss,
gradients (grad.<name>) and the parameters after N AdamW steps (after.<name>).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from llama_ref import Llama, loss_fn, make_adamw  # noqa: E402


def main(case_dir):
    torch.set_num_threads(1)
    case = json.load(open(os.path.join(case_dir, "case.json")))
    inputs = torch.load(os.path.join(case_dir, "inputs.pt"))
    model = Llama(case["model"])
    state = {k[len("param."):]: v for k, v in inputs.items() if k.startswith("param.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    tokens = inputs["tokens"]
    x, y = tokens[:, :-1], tokens[:, 1:]

    out = {}
    logits = model(x)
    loss = loss_fn(logits, y)
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
    torch.save(out, os.path.join(case_dir, "outputs.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
