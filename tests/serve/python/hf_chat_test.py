# A Hugging Face chat model with a tokenizer.json served as people serve Llama 3 instruct: the
# folder (tests/python/hf_chat_folder.py) ships Llama 3.1's chat template and says in
# generation_config.json only that <|eot_id|> ends a turn. `cadre generate --chat` must build the
# prompt transformers' apply_chat_template builds, token for token; `cadre serve` must answer the
# official openai client's chat request through that template and stop at <|eot_id|>.
import json
import os
import subprocess
import sys

import openai
import pytest
from transformers import AutoTokenizer

from server import Server

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER_SCRIPT = os.path.join(HERE, "..", "..", "python", "hf_chat_folder.py")
MESSAGES = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Say hello."}]
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hf_chat"))
    subprocess.run([sys.executable, FOLDER_SCRIPT, out], check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def tokenizer(folder):
    return AutoTokenizer.from_pretrained(folder)


def reference_prompt(tokenizer, messages):
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_generate_chat_builds_transformers_prompt_and_stops_at_eot(folder, tokenizer):
    argv = [os.environ["CADRE_BIN"], "generate", "--model", folder, "--chat", "--system", MESSAGES[0]["content"],
            "--prompt", MESSAGES[1]["content"], "--greedy", "--json", "--max-tokens", "10", "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["prompt_tokens"] == reference_prompt(tokenizer, MESSAGES)
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    assert out["tokens"] == [tokenizer.convert_tokens_to_ids("Hello"), eot]
    assert out["text"] == "Hello"
    assert out["finish_reason"] == "stop"


@pytest.fixture(scope="module")
def client(folder):
    with Server(model=folder) as s:
        with openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=TIMEOUT_S) as c:
            yield c
        code = s.stop()
        assert code == 0, f"cadre serve exited with {code} after SIGTERM:\n{s.output()}"


def test_serve_answers_through_the_template_and_stops_at_eot(client, tokenizer):
    model = client.models.list().data[0].id
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=10, temperature=0)
    assert r.choices[0].message.content == "Hello"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == len(reference_prompt(tokenizer, MESSAGES))
    # <|eot_id|> banned, nothing else ends the answer: it runs to max_tokens.
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=6, temperature=0,
                                       logit_bias={str(eot): -100})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 6
    assert r.choices[0].message.content.startswith("Hello")


def test_serve_completion_prompt_gets_the_post_processors_bos(client, tokenizer):
    model = client.models.list().data[0].id
    r = client.completions.create(model=model, prompt="Hello there", max_tokens=2, temperature=0)
    assert r.usage.prompt_tokens == len(tokenizer("Hello there")["input_ids"])

