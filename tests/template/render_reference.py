"""Renders chat-template cases with transformers (the reference Cadre's interpreter must match).

Usage: render_reference.py CASES.json > RESULTS.json

Each case: {"template": text, "messages": [...], "add_generation_prompt": bool,
"kwargs": {...}, "tools": [...] or null, "now": epoch seconds}. The rendering is what
`tokenizer.apply_chat_template(messages, tokenize=False, ...)` does: messages normalized by
`_normalize_chat_messages`, then `render_jinja_template` with the special tokens and kwargs.
`strftime_now` reads the case's fixed time instead of the clock, so dates are deterministic.
Each result: {"ok": rendered} or {"error": str(exception), "type": exception class name}.
"""
import json
import sys
import time

from transformers.utils import chat_template_utils as ctu


def render(case):
    compiled = ctu._compile_jinja_template(case["template"])  # cached: render_jinja_template reuses it
    now = case.get("now")
    if now is not None:
        compiled.globals["strftime_now"] = lambda fmt: time.strftime(fmt, time.localtime(now))
    messages = ctu._normalize_chat_messages(case["messages"])
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=case.get("tools"),
        chat_template=case["template"],
        add_generation_prompt=case.get("add_generation_prompt", False),
        **case.get("kwargs", {}),
    )
    return rendered[0]


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append({"ok": render(case)})
        except Exception as e:  # the C++ side checks the message and that both refused
            results.append({"error": str(e), "type": type(e).__name__})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
