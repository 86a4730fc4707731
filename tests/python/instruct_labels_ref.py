"""Reference side of tests/instruct/instruct_test.cpp: writes the Llama 3-style chat folder of
hf_chat_folder.py (tokenizer.json, Llama 3.1's template) into <dir>, and for a few samples the
ids transformers gives and which of them are learned, into <dir>/expected.json:

  instruct_labels_ref.py <dir>

The rule is the one labelled_tokens.h states, computed here with transformers' own rendering and
tokenization: a chat is apply_chat_template(messages, tokenize=True); assistant turn k is
learned from where apply_chat_template(messages[:k], add_generation_prompt=True) stops agreeing
with apply_chat_template(messages[:k+1]) to the latter's end. Prompt/completion: tokenizer(prompt
+ completion) + EOS, learned after the common prefix with tokenizer(prompt).
"""
import json
import os
import sys

from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_chat_folder  # noqa: E402

SAMPLES = [
    {"messages": [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello"}]},
    {"messages": [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello there."}, {"role": "user", "content": "And now?"},
                  {"role": "assistant", "content": " Now, hello.  "}]},
    {"instruction": "Greet the user.", "input": "", "output": "Hello!"},
    {"instruction": "Translate", "input": "bonjour", "output": "hello"},
    {"prompt": "The assistant says", "completion": " hello there"},
    {"text": "Hello there, how are you?"},
]


def ids_of(x):
    return list(x["input_ids"] if hasattr(x, "keys") else x)


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def chat_labels(tok, messages):
    ids = ids_of(tok.apply_chat_template(messages, tokenize=True))
    learn = [0] * len(ids)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = ids_of(tok.apply_chat_template(messages[:k], add_generation_prompt=True, tokenize=True)) if k else []
        answered = ids_of(tok.apply_chat_template(messages[:k + 1], tokenize=True))
        assert ids[:len(answered)] == answered
        for i in range(common_prefix(prompt, answered), len(answered)):
            learn[i] = 1
    return ids, learn


def labels(tok, sample):
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    if "messages" in sample:
        return chat_labels(tok, sample["messages"])
    if "instruction" in sample:
        user = sample["instruction"] + ("\n\n" + sample["input"] if sample["input"] else "")
        return chat_labels(tok, [{"role": "user", "content": user}, {"role": "assistant", "content": sample["output"]}])
    if "prompt" in sample:
        ids = tok(sample["prompt"] + sample["completion"])["input_ids"] + [eos]
        start = common_prefix(tok(sample["prompt"])["input_ids"], ids)
        return ids, [0] * start + [1] * (len(ids) - start)
    ids = tok(sample["text"])["input_ids"] + [eos]
    return ids, [1] * len(ids)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sys.argv = [sys.argv[0], out]
    hf_chat_folder.main()
    tok = AutoTokenizer.from_pretrained(out)
    cases = []
    for s in SAMPLES:
        ids, learn = labels(tok, s)
        cases.append({"line": json.dumps(s), "ids": ids, "learn": learn})
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(cases, f)


if __name__ == "__main__":
    main()
