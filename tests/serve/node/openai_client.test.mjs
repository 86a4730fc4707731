// `cadre serve` through the official OpenAI Node client (npm `openai`, version pinned in
// package.json): list models, a completion, a chat completion, a streamed chat completion
// assembled from its chunks, n honoured, usage in the stream, log-probabilities, and the
// client's errors for a bad key and an over-long prompt.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "./server.mjs";

const KEY = "test-key-123";
const EOS = 2;  // the tiny tokenizer's </s>

describe("cadre serve with the OpenAI client", () => {
  let server, client, model;
  before(async () => {
    server = await startServer(["--api-key", KEY]);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: KEY, maxRetries: 0 });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.output());
  });

  it("lists the model", async () => {
    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    assert.deepEqual(ids, ["run"]);
    model = ids[0];
  });

  it("completes a prompt, greedy and deterministic", async () => {
    const ask = () => client.completions.create({ model, prompt: "The Congress", max_tokens: 12, temperature: 0,
                                                  logit_bias: { [EOS]: -100 } });
    const a = await ask(), b = await ask();
    assert.equal(a.object, "text_completion");
    assert.equal(a.choices.length, 1);
    assert.equal(a.choices[0].finish_reason, "length");
    assert.ok(a.choices[0].text.length > 0);
    assert.equal(a.choices[0].text, b.choices[0].text);
    assert.equal(a.usage.completion_tokens, 12);
    assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 12);
  });

  it("answers a chat, and the stream assembles to the same message", async () => {
    const request = { model, messages: [{ role: "system", content: "You are brief." }, { role: "user", content: "Tell me about the nation." }],
                      max_tokens: 20, temperature: 0, logit_bias: { [EOS]: -100 } };
    const whole = await client.chat.completions.create(request);
    assert.equal(whole.object, "chat.completion");
    assert.equal(whole.choices[0].message.role, "assistant");
    assert.equal(whole.choices[0].finish_reason, "length");
    const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    let text = "", role = null, finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.object, "chat.completion.chunk");
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        if (choice.delta.role) role = choice.delta.role;
        if (choice.delta.content) text += choice.delta.content;
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.ok(chunks > 2, `only ${chunks} chunks`);
    assert.equal(role, "assistant");
    assert.equal(finish, "length");
    assert.equal(text, whole.choices[0].message.content);
    assert.deepEqual(usage, whole.usage);
    assert.equal(usage.completion_tokens, 20);
  });

  it("honours n with one seed: n different samples, the same ones again", async () => {
    const ask = () => client.completions.create({ model, prompt: "The people", max_tokens: 16, n: 3, temperature: 1.0, seed: 7,
                                                  logit_bias: { [EOS]: -100 } });
    const a = await ask(), b = await ask();
    assert.equal(a.choices.length, 3);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
    assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
    assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, "the 3 choices are identical");
    assert.equal(a.usage.completion_tokens, 48);
  });

  it("returns log-probabilities", async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hello" }], max_tokens: 4,
                                                     temperature: 0, logprobs: true, top_logprobs: 3, logit_bias: { [EOS]: -100 } });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const t of content) {
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 3);
      // Greedy: the chosen token is the most likely one.
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
    }
    const c = await client.completions.create({ model, prompt: "The", max_tokens: 3, temperature: 0, logprobs: 2 });
    assert.equal(c.choices[0].logprobs.tokens.length, c.usage.completion_tokens);
  });

  it("stops at a stop sequence", async () => {
    const free = await client.completions.create({ model, prompt: "The Congress", max_tokens: 30, temperature: 0, logit_bias: { [EOS]: -100 } });
    const text = free.choices[0].text;
    const stop = text.slice(8, 11);  // three characters from the middle of the greedy text
    assert.equal(stop.length, 3);
    const cut = await client.completions.create({ model, prompt: "The Congress", max_tokens: 30, temperature: 0, stop: [stop],
                                                  logit_bias: { [EOS]: -100 } });
    assert.equal(cut.choices[0].finish_reason, "stop");
    assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
  });

  it("rejects a bad key with AuthenticationError (401)", async () => {
    const bad = new OpenAI({ baseURL: server.baseURL, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    await assert.rejects(bad.completions.create({ model: "run", prompt: "x", max_tokens: 1 }),
                         (e) => e instanceof OpenAI.AuthenticationError && e.code === "invalid_api_key");
  });

  it("rejects an over-long prompt with BadRequestError (400, context_length_exceeded)", async () => {
    const prompt = " nation".repeat(1100);
    await assert.rejects(client.chat.completions.create({ model, messages: [{ role: "user", content: prompt }] }),
                         (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.code === "context_length_exceeded");
  });

  it("rejects an unsupported parameter by name", async () => {
    await assert.rejects(client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
                                                          tools: [{ type: "function", function: { name: "f", parameters: {} } }] }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === "tools");
  });
});
