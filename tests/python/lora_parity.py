"""Reference side of tests/models/lora_parity_test.cpp: PEFT's LoRA (`peft` from PyPI, pinned in
python/requirements-torch.txt) on the project's PyTorch reference Llama (python/llama_ref.py,
whose layers carry Cadre's names, so PEFT's target_modules are Cadre's layer names), on the
same weights, adapters and tokens as Cadre, judged as llama_parity.py judges the base model.

Usage: lora_parity.py <case_dir>. Reads case.json (model config, optimizer settings, lora:
rank, alpha, targets) and inputs.pt (every parameter as param.<name>, adapters as
param.<layer>.lora_a / .lora_b, and tokens); writes outputs.pt with the logits, the loss, each
adapter factor's gradient (grad.<name>), the gradient norm before clipping at each clipped
AdamW step over PEFT's trainable parameters (grad_norms), and every parameter after those steps
(after.<name>, the frozen base included): float32 (<name>), float64 (ref.<name>) and float32
from weights moved by one ulp (ulp<k>.<name>; llama_parity.py says why).
"""
import os
import sys

import torch
from peft import LoraConfig, get_peft_model

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
from llama_parity import ULP_RUNS, run_case  # noqa: E402
from llama_ref import Llama, loss_fn  # noqa: E402

FACTORS = {"lora_a": "lora_A", "lora_b": "lora_B"}


def is_adapter(name):
    return name.rsplit(".", 1)[-1] in FACTORS


def peft_name(cadre_name):
    """layers.0.attention.wq.lora_a -> base_model.model.layers.0.attention.wq.lora_A.default.weight"""
    layer, factor = cadre_name.rsplit(".", 1)
    return f"base_model.model.{layer}.{FACTORS[factor]}.default.weight"


def base_name(peft_param):
    """base_model.model.layers.0.attention.wq.base_layer.weight -> layers.0.attention.wq.weight"""
    return peft_param[len("base_model.model."):].replace(".base_layer.", ".")


def run(case, state, tokens, dtype):
    """Forward, backward and N clipped AdamW steps of the PEFT model in `dtype`."""
    model = Llama(case["model"]).to(dtype)
    base = {k: v for k, v in state.items() if not is_adapter(k)}
    missing, unexpected = model.load_state_dict(base, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    lora = case["lora"]
    model = get_peft_model(model, LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=0.0,
                                             target_modules=lora["targets"], bias="none"))
    params = dict(model.named_parameters())
    adapters = {k for k in params if ".lora_" in k}
    assert adapters == {peft_name(k) for k in state if is_adapter(k)}, sorted(adapters)
    assert all(params[k].dtype == dtype for k in adapters), "PEFT's adapters are not in the model's dtype"
    with torch.no_grad():
        for k, v in state.items():
            if is_adapter(k):
                params[peft_name(k)].copy_(v)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert len(trainable) == len(adapters), "PEFT trains something besides the adapters"
    x, y = tokens[:, :-1], tokens[:, 1:]

    out = {}
    logits = model(x)
    loss = loss_fn(logits, y)
    assert logits.dtype == dtype and loss.dtype == dtype, (logits.dtype, loss.dtype)
    loss.backward()
    out["logits"], out["loss"] = logits.detach().clone(), loss.detach().clone()
    for k in state:
        if is_adapter(k):
            out["grad." + k] = params[peft_name(k)].grad.detach().clone()

    o = case["optim"]
    # Cadre's grouping: decay on matrices (every adapter factor is one).
    opt = torch.optim.AdamW(trainable, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                            weight_decay=o["weight_decay"])
    norms = []
    for _ in range(o["steps"]):
        opt.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, o["grad_clip"])))
        opt.step()
    for k in state:
        p = params[peft_name(k)] if is_adapter(k) else params.get("base_model.model." + k)
        if p is None:  # a layer PEFT wrapped keeps its weight as base_layer.weight
            p = next(v for n, v in params.items() if ".base_layer." in n and base_name(n) == k)
        out["after." + k] = p.detach().clone()
    out["grad_norms"] = torch.tensor(norms, dtype=torch.float64)
    return out


def main(case_dir):
    count = run_case(case_dir, run)
    print(f"ok: torch {torch.__version__}, peft {__import__('peft').__version__}: {count} tensors from "
          f"{ULP_RUNS} float32 runs and a float64 run")


if __name__ == "__main__":
    main(sys.argv[1])
