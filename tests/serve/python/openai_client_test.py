# `cadre serve` through the official OpenAI Python client (PyPI `openai`, version pinned in
# python/requirements.txt): list models, a completion, a chat completion, a streamed chat
# completion assembled from its chunks, n honoured, usage in the stream, log-probabilities, a
# stop sequence, and the client's errors for a bad key, an over-long prompt and an unsupported
# parameter. Retries are off (max_retries=0), so a failing request fails the test at once.
import openai
import pytest

from server import Server

KEY = "test-key-123"
EOS = 2  # the tiny tokenizer's </s>
NO_EOS = {str(EOS): -100}
TIMEOUT_S = 120.0  # per request


@pytest.fixture(scope="module")
def server():
    with Server(["--api-key", KEY]) as s:
        yield s
        code = s.stop()
        assert code == 0, f"cadre serve exited with {code} after SIGTERM:\n{s.output()}"


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=TIMEOUT_S) as c:
        yield c


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def test_lists_the_model(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == ["run"]


def test_completes_a_prompt_greedy_and_deterministic(client, model):
    def ask():
        return client.completions.create(model=model, prompt="The Congress", max_tokens=12, temperature=0,
                                         logit_bias=NO_EOS)

    a, b = ask(), ask()
    assert a.object == "text_completion"
    assert len(a.choices) == 1
    assert a.choices[0].finish_reason == "length"
    assert len(a.choices[0].text) > 0
    assert a.choices[0].text == b.choices[0].text
    assert a.usage.completion_tokens == 12
    assert a.usage.total_tokens == a.usage.prompt_tokens + 12


def test_answers_a_chat_and_the_stream_assembles_to_the_same_message(client, model):
    request = dict(model=model, messages=[{"role": "system", "content": "You are brief."},
                                          {"role": "user", "content": "Tell me about the nation."}],
                   max_tokens=20, temperature=0, logit_bias=NO_EOS)
    whole = client.chat.completions.create(**request)
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length"

    text, role, finish, usage, chunks = "", None, None, None, 0
    with client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}) as stream:
        for chunk in stream:
            chunks += 1
            assert chunk.object == "chat.completion.chunk"
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.role:
                    role = choice.delta.role
                if choice.delta.content:
                    text += choice.delta.content
                if choice.finish_reason:
                    finish = choice.finish_reason
    assert chunks > 2, f"only {chunks} chunks"
    assert role == "assistant"
    assert finish == "length"
    assert text == whole.choices[0].message.content
    assert usage is not None, "no usage in the stream"
    assert usage.to_dict() == whole.usage.to_dict()
    assert usage.completion_tokens == 20


def test_honours_n_with_one_seed(client, model):
    """n different samples, and the same ones again."""
    def ask():
        return client.completions.create(model=model, prompt="The people", max_tokens=16, n=3, temperature=1.0,
                                         seed=7, logit_bias=NO_EOS)

    a, b = ask(), ask()
    assert len(a.choices) == 3
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert len({c.text for c in a.choices}) > 1, "the 3 choices are identical"
    assert a.usage.completion_tokens == 48


def test_returns_log_probabilities(client, model):
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=4,
                                       temperature=0, logprobs=True, top_logprobs=3, logit_bias=NO_EOS)
    content = r.choices[0].logprobs.content
    assert len(content) == 4
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert t.top_logprobs[0].logprob == t.logprob
    c = client.completions.create(model=model, prompt="The", max_tokens=3, temperature=0, logprobs=2)
    assert len(c.choices[0].logprobs.tokens) == c.usage.completion_tokens


def test_stops_at_a_stop_sequence(client, model):
    free = client.completions.create(model=model, prompt="The Congress", max_tokens=30, temperature=0,
                                     logit_bias=NO_EOS)
    text = free.choices[0].text
    stop = text[8:11]  # three characters from the middle of the greedy text
    assert len(stop) == 3, f"greedy text too short: {text!r}"
    cut = client.completions.create(model=model, prompt="The Congress", max_tokens=30, temperature=0, stop=[stop],
                                    logit_bias=NO_EOS)
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[:text.index(stop)]


def test_rejects_a_bad_key_with_authentication_error(server):
    with openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0, timeout=TIMEOUT_S) as bad:
        with pytest.raises(openai.AuthenticationError) as e:
            bad.models.list()
        assert e.value.status_code == 401
        with pytest.raises(openai.AuthenticationError) as e:
            bad.completions.create(model="run", prompt="x", max_tokens=1)
        assert e.value.code == "invalid_api_key"


def test_rejects_an_over_long_prompt_with_bad_request_error(client, model):
    """400, context_length_exceeded."""
    prompt = " nation" * 1100
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
    assert e.value.status_code == 400
    assert e.value.code == "context_length_exceeded"


def test_rejects_an_unsupported_parameter_by_name(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert e.value.param == "tools"
