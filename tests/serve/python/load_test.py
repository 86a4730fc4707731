# 32 concurrent streaming clients (the official OpenAI Python client, AsyncOpenAI with
# asyncio.gather) against one `cadre serve`: every stream completes, and with the same output it
# had when its request was served alone (batch invariance: greedy and seeded sampling, token for
# token and log-probability for log-probability); the server really batched them: a second
# server, started with --batch-wait-ms, holds its first step until all 32 requests are queued, so
# its first decode steps run all 32 (no timing luck). Reports p50/p99 time to first token and
# aggregate tokens/s (figures, not assertions: speed belongs to bench/).
import asyncio
import re
import time

import openai
import pytest

from server import Server, percentile

CLIENTS = 32
EOS = 2
PROMPTS = ["The Congress", "Our nation", "The people of the United States", "In this year", "War and peace",
           "The economy", "Fellow citizens", "The government"]
TIMEOUT_S = 300.0  # per request; retries are off (max_retries=0)


def request(i: int, model: str) -> dict:
    """Request i: a prompt, a length and sampling parameters of its own (greedy or seeded sampling)."""
    r = {"model": model, "max_tokens": 40 + (i % 5) * 6, "logit_bias": {str(EOS): -100}}
    if i % 3 == 0:
        r["temperature"] = 0
    else:
        r.update(temperature=0.8 + (i % 4) * 0.1, seed=1000 + i, top_p=0.9 if i % 2 else 1.0,
                 extra_body={"top_k": 20 if i % 4 == 1 else 0})  # top_k is not an OpenAI parameter
    if i % 2:
        r["messages"] = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
    else:
        r["prompt"] = PROMPTS[i % len(PROMPTS)]
    if i % 4 == 1:
        r.update(logprobs=True, top_logprobs=2)  # chat
    if i % 4 == 2:
        r["logprobs"] = 2  # completions
    return r


async def stream(client: openai.AsyncOpenAI, r: dict) -> dict:
    """Streams one request; returns its text, log-probabilities, token count and time to first token."""
    t0 = time.perf_counter()
    ttft, text, logprobs, usage = None, "", [], None
    chat = "messages" in r
    create = client.chat.completions.create if chat else client.completions.create
    s = await create(**r, stream=True, stream_options={"include_usage": True})
    async with s:
        async for chunk in s:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                piece = c.delta.content if chat else c.text
                if piece and ttft is None:
                    ttft = (time.perf_counter() - t0) * 1000
                if piece:
                    text += piece
                if c.logprobs is not None and chat and c.logprobs.content:
                    logprobs += [(t.token, t.logprob) for t in c.logprobs.content]
                if c.logprobs is not None and not chat and c.logprobs.tokens:
                    logprobs += list(zip(c.logprobs.tokens, c.logprobs.token_logprobs, strict=True))
    return {"text": text, "logprobs": logprobs, "tokens": usage.completion_tokens if usage else None, "ttft": ttft,
            "ms": (time.perf_counter() - t0) * 1000}


@pytest.fixture(scope="module")
def server():
    with Server(["--max-batch", str(CLIENTS)]) as s:
        yield s
        code = s.stop()
        assert code == 0, f"cadre serve exited with {code} after SIGTERM:\n{s.output()}"


@pytest.fixture(scope="module")
def batching():
    # The wait bounds a failure (fewer than 32 requests arriving); it is not slept through.
    with Server(["--max-batch", str(CLIENTS), "--batch-wait-ms", "120000"]) as s:
        yield s
        code = s.stop()
        assert code == 0, f"cadre serve --batch-wait-ms exited with {code} after SIGTERM:\n{s.output()}"


async def alone_then_together(server: Server, batching: Server):
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0,
                                  timeout=TIMEOUT_S) as client, \
               openai.AsyncOpenAI(base_url=batching.base_url, api_key="unused", max_retries=0,
                                  timeout=TIMEOUT_S) as batching_client:
        model = (await client.models.list()).data[0].id
        requests = [request(i, model) for i in range(CLIENTS)]
        alone = [await stream(client, r) for r in requests]
        t0 = time.perf_counter()
        together = await asyncio.gather(*(stream(batching_client, r) for r in requests))
        return requests, alone, together, time.perf_counter() - t0


def test_all_complete_each_with_its_output_alone_and_the_server_batched_them(server, batching, capsys):
    requests, alone, together, seconds = asyncio.run(alone_then_together(server, batching))

    for i in range(CLIENTS):
        assert together[i]["tokens"] == requests[i]["max_tokens"], f"client {i}: token count"
        assert len(together[i]["text"]) > 0, f"client {i}: no text"
        assert together[i]["text"] == alone[i]["text"], f"client {i}: batched output differs from its output alone"
        assert together[i]["logprobs"] == alone[i]["logprobs"], f"client {i}: log-probabilities differ"
    metrics = batching.metrics()
    le16 = re.search(r'cadre_serve_batch_size_bucket\{le="16"\} (\d+)', metrics)
    count = re.search(r"cadre_serve_batch_size_count (\d+)", metrics)
    assert le16 and count, f"no cadre_serve_batch_size histogram in /metrics:\n{metrics}"
    le16, steps = int(le16.group(1)), int(count.group(1))
    assert steps - le16 > 0, f"no decoding step ran more than 16 sequences together:\n{metrics}"

    ttft = [r["ttft"] for r in together]
    tokens = sum(r["tokens"] for r in together)
    alone_rate = sum(r["tokens"] for r in alone) / (sum(r["ms"] for r in alone) / 1000)
    with capsys.disabled():
        print(f"\nload: {CLIENTS} concurrent streams, {tokens} tokens in {seconds:.2f} s: "
              f"{tokens / seconds:.0f} tokens/s aggregate (one at a time: {alone_rate:.0f} tokens/s); "
              f"time to first token p50 {percentile(ttft, 50):.1f} ms, p99 {percentile(ttft, 99):.1f} ms; "
              f"{steps - le16} of {steps} decode steps ran more than 16 sequences "
              f"(the first step waited for all {CLIENTS} requests: time to first token and the aggregate include "
              f"that wait)")
