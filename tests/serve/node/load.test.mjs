// 32 concurrent streaming clients (the OpenAI Node client) against one `cadre serve`: every
// stream completes, and with the same output it had when its request was served alone
// (batch invariance: greedy and seeded sampling, token for token and log-probability for
// log-probability); the server really batched them: a second server, started with
// --batch-wait-ms, holds its first step until all 32 requests are queued, so its first decode
// steps run all 32 (no timing luck). Reports p50/p99 time to first token and aggregate tokens/s (figures, not
// assertions: speed belongs to bench/).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { percentile, startServer } from "./server.mjs";

const CLIENTS = 32;
const EOS = 2;
const PROMPTS = ["The Congress", "Our nation", "The people of the United States", "In this year", "War and peace",
                 "The economy", "Fellow citizens", "The government"];

// Request i: a prompt, a length and sampling parameters of its own (greedy or seeded sampling).
function request(i, model) {
  const r = { model, max_tokens: 40 + (i % 5) * 6, logit_bias: { [EOS]: -100 } };
  if (i % 3 === 0) r.temperature = 0;
  else Object.assign(r, { temperature: 0.8 + (i % 4) * 0.1, seed: 1000 + i, top_p: i % 2 ? 0.9 : 1.0, top_k: i % 4 === 1 ? 20 : 0 });
  if (i % 2) r.messages = [{ role: "user", content: PROMPTS[i % PROMPTS.length] }];
  else r.prompt = PROMPTS[i % PROMPTS.length];
  if (i % 4 === 1) Object.assign(r, { logprobs: true, top_logprobs: 2 });  // chat
  if (i % 4 === 2) r.logprobs = 2;                                          // completions
  return r;
}

// Streams one request; returns its text, log-probabilities, token count and time to first token.
async function stream(client, r) {
  const t0 = performance.now();
  let ttft = null, text = "", logprobs = [], usage = null;
  const chat = !!r.messages;
  const body = { ...r, stream: true, stream_options: { include_usage: true } };
  const s = chat ? await client.chat.completions.create(body) : await client.completions.create(body);
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      const piece = chat ? c.delta.content : c.text;
      if (piece && ttft === null) ttft = performance.now() - t0;
      if (piece) text += piece;
      if (c.logprobs?.content) logprobs.push(...c.logprobs.content.map((t) => [t.token, t.logprob]));
      if (c.logprobs?.tokens) logprobs.push(...c.logprobs.tokens.map((t, k) => [t, c.logprobs.token_logprobs[k]]));
    }
  }
  return { text, logprobs, tokens: usage?.completion_tokens, ttft, ms: performance.now() - t0 };
}

describe("32 concurrent streaming clients", () => {
  let server, client, model, batching, batchingClient;
  before(async () => {
    server = await startServer(["--max-batch", String(CLIENTS)]);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: "unused", maxRetries: 0, timeout: 300000 });
    model = (await client.models.list()).data[0].id;
    // The wait bounds a failure (fewer than 32 requests arriving); it is not slept through.
    batching = await startServer(["--max-batch", String(CLIENTS), "--batch-wait-ms", "120000"]);
    batchingClient = new OpenAI({ baseURL: batching.baseURL, apiKey: "unused", maxRetries: 0, timeout: 300000 });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.output());
    assert.equal(await batching.stop(), 0, batching.output());
  });

  it("all complete, each with the output it has alone, and the server batched them", async () => {
    const requests = Array.from({ length: CLIENTS }, (_, i) => request(i, model));
    const alone = [];
    for (const r of requests) alone.push(await stream(client, r));

    const t0 = performance.now();
    const together = await Promise.all(requests.map((r) => stream(batchingClient, r)));
    const seconds = (performance.now() - t0) / 1000;

    for (let i = 0; i < CLIENTS; i++) {
      assert.equal(together[i].tokens, requests[i].max_tokens, `client ${i}: token count`);
      assert.ok(together[i].text.length > 0, `client ${i}: no text`);
      assert.equal(together[i].text, alone[i].text, `client ${i}: batched output differs from its output alone`);
      assert.deepEqual(together[i].logprobs, alone[i].logprobs, `client ${i}: log-probabilities differ`);
    }
    const metrics = await (await fetch(`http://127.0.0.1:${batching.port}/metrics`)).text();
    const le16 = Number(metrics.match(/cadre_serve_batch_size_bucket\{le="16"\} (\d+)/)[1]);
    const steps = Number(metrics.match(/cadre_serve_batch_size_count (\d+)/)[1]);
    assert.ok(steps - le16 > 0, `no decoding step ran more than 16 sequences together:\n${metrics}`);

    const ttft = together.map((r) => r.ttft);
    const tokens = together.reduce((n, r) => n + r.tokens, 0);
    const aloneRate = alone.reduce((n, r) => n + r.tokens, 0) / (alone.reduce((n, r) => n + r.ms, 0) / 1000);
    console.log(`load: ${CLIENTS} concurrent streams, ${tokens} tokens in ${seconds.toFixed(2)} s: ` +
                `${(tokens / seconds).toFixed(0)} tokens/s aggregate (one at a time: ${aloneRate.toFixed(0)} tokens/s); ` +
                `time to first token p50 ${percentile(ttft, 50).toFixed(1)} ms, p99 ${percentile(ttft, 99).toFixed(1)} ms; ` +
                `${steps - le16} of ${steps} decode steps ran more than 16 sequences ` +
                `(the first step waited for all ${CLIENTS} requests: time to first token and the aggregate include that wait)`);
  });
});
