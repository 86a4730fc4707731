# Several LoRA adapters served beside one base (`cadre serve --lora name=path`, as vLLM's
# --lora-modules): two adapters written by the real `peft` (get_peft_model on transformers' model
# of the base, then save_pretrained) onto the chat model of tests/python/hf_chat_folder.py. The
# official openai client lists the base and both adapters; requests for the base and each
# adapter run together in the same decoding steps (the server holds its first step until the
# whole batch is queued, so they must share it: /metrics counts steps that held two or more
# models) and each answer's tokens and logprobs equal the ones it gets served alone; the
# adapters change the answers' probabilities; an unknown model is a 404 naming the served ones; bad --lora flags exit 2.
import os
import re
import subprocess
import sys
import threading

import openai
import pytest
import torch

from server import Server

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER_SCRIPT = os.path.join(HERE, "..", "..", "python", "hf_chat_folder.py")
PROMPTS = ["Say hello to the user.", "The assistant answers"]
ADAPTERS = {"polite": (["q_proj", "v_proj", "down_proj"], 4, 11), "brief": (["q_proj", "k_proj", "v_proj", "o_proj",
                                                                          "gate_proj", "up_proj", "down_proj"], 8, 12)}
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    base = str(tmp_path_factory.mktemp("base"))
    subprocess.run([sys.executable, FOLDER_SCRIPT, base], check=True, capture_output=True, timeout=300)
    adapters = {}
    for name, (targets, rank, seed) in ADAPTERS.items():
        model = get_peft_model(LlamaForCausalLM.from_pretrained(base, dtype=torch.float32),
                               LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, lora_dropout=0.0))
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # B random (PEFT starts it at zero): the adapter changes the model
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        adapters[name] = str(tmp_path_factory.mktemp(name))
        model.save_pretrained(adapters[name])
    return base, adapters


def complete(client, model, prompt):
    """(tokens, their logprobs, the model the answer names): the logprobs are the same bits whenever
    the request runs, batched or alone."""
    r = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0, logprobs=0)
    return tuple(r.choices[0].logprobs.tokens), tuple(r.choices[0].logprobs.token_logprobs), r.model


def test_mixed_adapter_batches_equal_each_request_alone(folders):
    base, adapters = folders
    lora = ["--model-name", "base", "--lora", *[f"{name}={path}" for name, path in adapters.items()]]
    jobs = [(model, prompt) for model in ["base", *adapters] for prompt in PROMPTS]
    # Together: an idle server holds its first step until all the jobs are queued.
    with Server(extra_args=lora + ["--max-batch", str(len(jobs)), "--batch-wait-ms", "60000"], model=base) as s:
        with openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=TIMEOUT_S) as client:
            together, errors = {}, []

            def run(job):
                try:
                    together[job] = complete(client, *job)
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(e)

            threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join(TIMEOUT_S)
            assert not errors, errors
            mixed = re.search(r"^cadre_serve_mixed_adapter_steps_total (\S+)$", s.metrics(), re.M)
            assert mixed and float(mixed.group(1)) >= 1, s.metrics()
        assert s.stop() == 0, s.output()
    # Alone: one request at a time, on a server that does not wait for a batch.
    with Server(extra_args=lora, model=base) as s:
        with openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=TIMEOUT_S) as client:
            listed = {m.id: m for m in client.models.list().data}
            assert sorted(listed) == sorted(["base", *adapters]), listed
            assert all(getattr(listed[name], "parent", None) == "base" for name in adapters)
            for job in jobs:
                alone = complete(client, *job)
                assert alone == together[job], f"{job}: alone {alone}, batched {together[job]}"
                assert alone[2] == job[0], "the answer names the model asked for"
            mixed = re.search(r"^cadre_serve_mixed_adapter_steps_total (\S+)$", s.metrics(), re.M)
            assert mixed and float(mixed.group(1)) == 0, "requests one at a time never share a step"
            for prompt in PROMPTS:  # (the chat model's answer is built to be "Hello": its probabilities move)
                same = {together[(m, prompt)][1] == together[("base", prompt)][1] for m in adapters}
                assert same == {False}, f"an adapter left the base's answer to {prompt!r} unchanged"
            with pytest.raises(openai.NotFoundError, match="this server serves 'base', 'brief', 'polite'"):
                client.completions.create(model="other", prompt="x", max_tokens=1)
        assert s.stop() == 0, s.output()


@pytest.mark.parametrize("flag, says", [
    ("noequals", "expected name=path"),
    ("base=/x", "'base' is the base model's id"),
    ("a=/nonexistent", "--lora a: '/nonexistent' is not a directory"),
])
def test_bad_lora_flags_exit_2(folders, flag, says):
    base, _ = folders
    done = subprocess.run([os.environ["CADRE_BIN"], "serve", "--model", base, "--model-name", "base", "--port", "0",
                           "--lora", flag], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr, done.stderr
