// The official OpenAI Node client against photon serve: chat (whole and streamed), completions with logprobs and
// echo, seeds, n > 1, a logit bias, tools accepted, and the client's error classes for a wrong key, an unknown model and a
// request too long for the context.   Usage: node client_test.mjs PORT API_KEY MODEL
import assert from "node:assert/strict";
import OpenAI from "openai";

const [port, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0 });
let passed = 0;
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    passed++;
  } catch (e) {
    failed++;
    console.log(`FAIL: ${name}: ${e.stack || e}`);
  }
}

const messages = [
  { role: "system", content: "You are brief." },
  { role: "user", content: "Say hello." },
];

await check("models", async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, model);
});

await check("chat", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 6);
  assert.ok(r.usage.prompt_tokens > 10);
});

await check("chat stream equals the whole reply", async () => {
  const body = { model, messages, max_tokens: 8, temperature: 0, ignore_eos: true };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      text += c.delta.reasoning_content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  const m = whole.choices[0].message;
  assert.equal(text, (m.content ?? "") + (m.reasoning_content ?? ""));
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 8);
  assert.ok(chunks >= 3);
});

await check("chat logprobs", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 4, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob);
  }
});

await check("seeded sampling repeats; n choices", async () => {
  const body = { model, messages, max_tokens: 6, temperature: 1, seed: 1234, n: 3, ignore_eos: true };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.equal(a.usage.completion_tokens, 18);
});

await check("completions with logprobs and echo", async () => {
  const r = await client.completions.create({ model, prompt: "Hello world", max_tokens: 3, logprobs: 2, echo: true });
  assert.equal(r.object, "text_completion");
  assert.ok(r.choices[0].text.startsWith("Hello world"));
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 2 + 3); // the prompt's two tokens and three generated
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.text_offset[0], 0);
});

await check("completions stream", async () => {
  const stream = await client.completions.create({ model, prompt: [9707, 1879], max_tokens: 5, stream: true });
  let n = 0;
  for await (const chunk of stream) n += chunk.choices.length;
  assert.ok(n >= 1);
});

await check("logit_bias; response_format text accepted, JSON refused", async () => {
  // 9707 is "Hello": a bias of 100 makes greedy decoding choose it every time.
  const body = { model, prompt: "Hello world", max_tokens: 3, temperature: 0, logprobs: 0, logit_bias: { 9707: 100 } };
  const r = await client.completions.create(body);
  assert.deepEqual(r.choices[0].logprobs.tokens, ["Hello", "Hello", "Hello"]);
  const text = await client.chat.completions.create({ model, messages, max_tokens: 2, response_format: { type: "text" } });
  assert.equal(text.usage.completion_tokens, 2);
  await assert.rejects(
    client.chat.completions.create({ model, messages, response_format: { type: "json_object" } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "response_format",
  );
});

await check("tools are accepted", async () => {
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
  const r = await client.chat.completions.create({ model, messages, tools, tool_choice: "auto", max_tokens: 3 });
  assert.ok(["length", "stop", "tool_calls"].includes(r.choices[0].finish_reason));
});

await check("errors: wrong key, unknown model, too long", async () => {
  const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages, max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_model_len/.test(e.message),
  );
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
